// The progress thread: the one place where operations move while no caller waits on them.
//
// oneCCL runs without its worker thread (CCL_WORKER_OFFLOAD=0, for latency) and the shared-memory queue advances
// only when polled, so an operation nobody polls does not move. One thread per process polls:
// - async operations while their caller computes (progress_in_background), as long as the caller holds them;
// - operations handed over for good (complete_in_background): torch futures and requests dropped before they
//   finished. The thread owns those, with the buffers they use, until they are through, then runs their Completion.
// It naps between rounds (Backoff), or sleeps on the shared segment's futex until a peer moves, and on a condition
// variable while nothing is pending. It stays out of an engine while a caller waits on it: that wait drives it.
// An async op is left alone for its first kCallerGrace: most are waited on at once (a layer's all_reduce through
// torch's functional collectives, async_op=True then wait()), and then the caller alone drives it; a thread that
// polled it meanwhile would only take a core from the ranks.
// Timeouts and dead peers are the operations' own business (their test() enforces them): the thread only polls.
#pragma once

#include <ccl_core/backoff.hpp>
#include <ccl_core/progress.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <sys/types.h>

namespace ccl_core::detail {

class ProgressThread {
public:
    static constexpr std::chrono::microseconds kCallerGrace{50};
    // The process's progress thread, started on first use.
    static ProgressThread& instance();
    // Polls `op` while someone else holds it (an async op: its caller may still wait on it itself).
    void watch(const std::shared_ptr<PendingOperation>& op);
    // Owns `op` until it is through, then runs `completion`.
    void own(std::shared_ptr<PendingOperation> op, Completion completion);
    // See stop_completions() in progress.hpp.
    void stop_completions();
    // Destroys what completed operations left behind (see graveyard_). Called on users' threads as they issue
    // operations; nothing on the progress thread itself.
    void release_completed();
    // release_completed() once the thread holds no operation its caller may have dropped meanwhile (it holds them
    // while it polls, and over its naps when they can wake it): for a user's thread that lets go of a communicator,
    // whose last operation may be one of those. Waits at most `bound` (a nap on a peer's futex).
    void let_go(std::chrono::milliseconds bound);
    // Puts `leftover` in the graveyard (see release_on_a_user_thread in progress.hpp).
    void bury(std::shared_ptr<void> leftover);
    bool is_this_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
    ~ProgressThread();

private:
    ProgressThread();
    void run();
    // One poll of every pending op (the lock is released meanwhile); true when any of them got through.
    bool poll_round(std::unique_lock<std::mutex>& lock);
    // Between rounds: the pause Backoff decides, on an op's futex or on wake_ (a new op ends it).
    void rest(std::unique_lock<std::mutex>& lock, Backoff& backoff, std::size_t seen);
    // When every entry is an async op younger than kCallerGrace: the moment the first of them comes of age.
    std::optional<std::chrono::steady_clock::time_point> all_in_grace(std::chrono::steady_clock::time_point now) const;
    struct Watched;
    void finish(Watched& w);
    // holding_ = false, and let_go() hears of it (caller holds mutex_).
    void stop_holding();

    struct Watched {
        std::weak_ptr<PendingOperation> watched;  // async ops: dropped here when their caller drops them
        std::shared_ptr<PendingOperation> owned;  // ops handed over for good
        Completion completion;
        const PendingOperation* key;  // identifies the entry after a watched op is gone
        std::chrono::steady_clock::time_point since;  // when it was handed over
    };
    std::mutex mutex_;
    std::condition_variable wake_;
    std::vector<Watched> watched_;
    bool stop_ = false;
    bool waiting_ = false;  // asleep on wake_ until a new op comes (or a nap ends): a new async op must wake it
    bool holding_ = false;  // in a round or a nap with references to callers' ops (let_go() waits it out)
    std::condition_variable let_go_;  // holding_ went false
    // Completions stop at interpreter exit; completion_mutex_ guards the one that runs (see stop_completions()).
    std::mutex completion_mutex_;
    bool completions_stopped_ = false;
    // What an owned operation leaves behind once its completion ran (the operation and its buffers), and what
    // operations destroyed on this thread hand over (release_on_a_user_thread). The thread never destroys them
    // itself: the last reference to an operation may be the last one to its communicator, and destroying a oneCCL
    // communicator is collective (a barrier over the store) and must not run beside another thread's oneCCL calls (a
    // communicator made meanwhile failed: "can't allocate prov->eps"); tensors need Python's lock. The users' next
    // call destroys them, as a dropped request's buffers always were.
    std::mutex graveyard_mutex_;
    std::vector<std::shared_ptr<void>> graveyard_;
    std::atomic<bool> graves_{false};
    // A child forked from this process (a DataLoader worker) has no such thread, and the mutex may have been held
    // at the fork: there the object is left alone (see instance()), and ops move only in their caller.
    const pid_t owner_;
    std::thread thread_;
};

// ProgressThread::release_completed() of the process's thread, if it was started (and not from that thread).
void release_completed_operations();
// ProgressThread::let_go() likewise.
void let_go_of_completed_operations(std::chrono::milliseconds bound);

}  // namespace ccl_core::detail
