// Background progress: async operations move while their caller computes.
//
// oneCCL runs without its worker thread (CCL_WORKER_OFFLOAD=0, for latency) and the shared-memory queue advances
// only when polled, so without help an op issued with async_op=True would move only once its caller waits. One
// thread per process takes every op whose caller will not wait right away (async_op=True: see
// Request::move_in_background) and polls it to completion, in naps that leave the cores to the caller's
// computation, or asleep on the shared segment's futex until a peer moves. It keeps out of a communicator while a
// caller waits on it: that wait drives it.
// It sleeps on a condition variable while nothing is pending. It also enforces the communicator's timeout and
// notices a dead same-host peer, so that a pending op fails in time even if nobody waits on it; the failure is
// kept and raised by the op's next test() or wait().
//
// CCL_CORE_PROGRESS=caller switches it off (ops then move only inside test()/wait(), as before).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <sys/types.h>

namespace ccl_core {
class PendingOperation;
}

namespace ccl_core::detail {

class ProgressThread {
public:
    // The process's progress thread (started on first use), or nullptr when CCL_CORE_PROGRESS=caller.
    static ProgressThread* instance();
    // Drives `op` until it completes, fails, or its Request is dropped.
    void watch(const std::shared_ptr<PendingOperation>& op);
    ~ProgressThread();

private:
    ProgressThread();
    void run();

    struct Watched {
        std::weak_ptr<PendingOperation> op;
        const PendingOperation* key;  // identifies the entry after the op is gone
        std::chrono::steady_clock::time_point since;  // when it was handed over
    };
    std::mutex mutex_;
    std::condition_variable wake_;
    std::vector<Watched> watched_;
    bool stop_ = false;
    // A child forked from this process (a DataLoader worker) has no such thread, and the mutex may have been held
    // at the fork: there the object is left alone (see instance()), and ops move only in their caller.
    const pid_t owner_;
    std::thread thread_;
};

}  // namespace ccl_core::detail
