// recv without a source rank (dist.recv(t) with src=None), which oneCCL cannot post.
//
// Every send announces itself in the group's store: the counter "ccl_torch/sent/<dst>/<src>" counts the sends
// from src to dst. A receiver knows how many of each peer's sends its recvs have already claimed, so any peer
// whose counter is ahead has a message waiting, and a recv from that peer takes it (oneCCL matches each pair's
// messages in order). The announcements run on a thread of their own, summed per peer and sent at most every
// 2 ms, so a send costs no store round trip (which would cost more than a small send: docs/performance.md).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace ccl_torch {

class AnySourceLedger {
public:
    AnySourceLedger(c10::intrusive_ptr<c10d::Store> store, int rank, int size);
    // Delivers every announcement still pending, then stops the thread.
    ~AnySourceLedger();

    void sent_to(int dst);        // after a send to dst was issued
    void received_from(int src);  // after a recv naming src was issued
    // A peer with an unclaimed send to this rank, claimed for the caller's recv; nullopt when none yet.
    std::optional<int> claim_any();

private:
    void run();
    void deliver(const std::map<int, int64_t>& counts);
    std::string key(int dst, int src) const;

    c10::intrusive_ptr<c10d::Store> store_;
    const int rank_;
    std::vector<int64_t> claimed_;  // per source: this rank's recvs so far
    std::mutex claim_mutex_;

    std::mutex mutex_;
    std::condition_variable cv_;
    std::map<int, int64_t> pending_;  // per destination: sends not yet announced
    bool stop_ = false;
    bool idle_ = false;  // the thread waits for a first send (rather than between deliveries)
    std::thread thread_;
    static constexpr std::chrono::milliseconds kDeliveryInterval{2};  // started by the first send
};

}  // namespace ccl_torch
