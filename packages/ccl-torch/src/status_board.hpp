// Where each rank of a group is, so that a hang explains itself.
//
// Every group keeps a small board: the last op this rank issued (sequence number, name, what it moves, when) and
// the last it completed. One thread per process publishes each board that changed to the group's store, at most
// every 0.5 s (and every 5 s while nothing changes, so that a silent rank shows as silent): the ops themselves never
// touch the store. When an op times out, or the ranks called different ops, ccl-core asks the board, which reads the
// other ranks' entries from the store (never waiting on a rank, only on the store) and says, for each rank, where it
// is: in the same op, still in an earlier one, done with the one before and elsewhere since, or silent for how long.
// The same report goes to stderr for every group of the process on SIGUSR1 (when nothing else handles that signal;
// CCL_TORCH_EXPLAIN_SIGNAL names another signal, or "none"), or from oneccl_bindings_for_pytorch.explain(), while the
// job goes on.
//
// Times across hosts are compared by their wall clocks (NTP keeps a cluster's within milliseconds).
#pragma once

#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace ccl_torch {

class StatusBoard : public std::enable_shared_from_this<StatusBoard> {
public:
    // `store` is the group's (torch's prefix store); entries live under "ccl_torch/whereabouts/<rank>".
    static std::shared_ptr<StatusBoard> create(c10::intrusive_ptr<c10d::Store> store, std::string group, int rank,
                                               int size);

    // What an op moves, recorded raw at issue (formatting waits until someone reads it).
    struct Moves {
        c10::ScalarType dtype = c10::ScalarType::Undefined;
        int64_t numel = 0;      // of its first tensor
        int tensors = 0;
    };
    void issued(uint64_t seq, const char* op, Moves moves);
    void completed(uint64_t seq);

    // Where every rank is (this one's state read here, the others' from the store), as lines for an error message.
    // `budget` bounds the time spent reading the store.
    std::string explain(std::chrono::milliseconds budget = std::chrono::milliseconds(1000)) const;

    // Writes this rank's entry if it changed since the last write, or if the last one is `heartbeat` old. Called by
    // the publishing thread; false once the store failed (the board then stops publishing).
    bool publish(std::chrono::milliseconds heartbeat);

    const std::string& group() const { return group_; }

private:
    StatusBoard(c10::intrusive_ptr<c10d::Store> store, std::string group, int rank, int size);
    std::string entry_locked() const;

    c10::intrusive_ptr<c10d::Store> store_;
    const std::string group_;
    const int rank_;
    const int size_;
    const std::string host_;
    mutable std::mutex mutex_;
    uint64_t issued_seq_ = 0;
    const char* issued_op_ = "";
    Moves issued_moves_;
    int64_t issued_at_ms_ = 0;  // wall clock
    uint64_t done_seq_ = 0;
    int64_t done_at_ms_ = 0;
    uint64_t version_ = 0;        // bumped by every change
    uint64_t published_version_ = 0;
    std::chrono::steady_clock::time_point published_at_{};
    bool store_failed_ = false;
};

// Starts the publishing thread (and the signal trigger) once per process; boards register themselves.
void watch_board(const std::shared_ptr<StatusBoard>& board);
// The report of every live board of this process (what SIGUSR1 prints).
std::string explain_all_groups();
// Stops the publishing thread (Python's atexit: it must not run while the interpreter goes).
void stop_publishing();

}  // namespace ccl_torch
