#include "communicator_impl.hpp"

#include <sched.h>

#include <thread>

namespace ccl_core {

Request::Request(std::shared_ptr<State> state) : state_(std::move(state)) {}

bool Request::test() {
    if (!state_) throw InvalidArgument("test() on an empty Request");
    State& s = *state_;
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.done) return true;
    s.comm->throw_if_aborted(s.op.c_str());
    bool ready = false;
    try {
        if (s.shm_op) {
            ready = s.comm->shm->progress(*s.shm_op);
        } else {
            if (s.comm->shm) s.comm->shm->drive();
            std::lock_guard<std::mutex> engine(detail::engine_mutex());
            ready = s.event.test();  // also drives progress: oneCCL runs without a worker thread (CCL_WORKER_OFFLOAD=0)
        }
    } catch (const InvalidArgument& e) {  // the ranks disagree: their sequence of operations is out of step now
        s.comm->abort(s.op + " was called differently on different ranks");
        throw InvalidArgument(std::string(e.what()) + ". The communicator is aborted; create a new one to continue.");
    } catch (const std::exception& e) {
        s.comm->abort(s.op + " failed");
        throw BackendError(s.op + " on " + s.comm->describe() + " failed" + (s.shm_op ? ": " : " in oneCCL: ") + e.what());
    }
    if (!ready) return false;
    if (s.finish) s.finish();
    s.done = true;
    return true;
}

void Request::wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) {
    if (!state_) throw InvalidArgument("wait() on an empty Request");
    const auto limit = timeout.value_or(state_->comm->options.timeout);
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + limit;
    auto next_callback = start + std::chrono::milliseconds(50);
    // Spin first (small messages complete in microseconds). Then give the core away: yield when every rank
    // has a core of its own, sleep briefly when ranks outnumber cores (a yield rarely lets a peer on another
    // run queue in, and without oneCCL's worker thread a peer progresses only while it runs).
    const bool oversubscribed = state_->comm->oversubscribed;
    const unsigned spins = oversubscribed ? 16 : 2000;
    constexpr auto kNap = std::chrono::microseconds(20);
    for (unsigned i = 0;; ++i) {
        if (test()) return;
        if (i >= spins) {
            if (oversubscribed) std::this_thread::sleep_for(kNap);
            else ::sched_yield();
        }
        if (!oversubscribed && (i & 63) != 0) continue;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) break;
        if (every_50ms && now >= next_callback) {
            next_callback = now + std::chrono::milliseconds(50);
            try {
                every_50ms();
            } catch (...) {
                state_->comm->abort(state_->op + " was interrupted while waiting");
                throw;
            }
        }
    }
    const std::string reason = state_->op + " timed out after " + std::to_string(limit.count()) + " ms";
    state_->comm->abort(reason);
    throw Timeout(state_->op + " on " + state_->comm->describe() + " did not complete within " +
                  std::to_string(limit.count()) + " ms; waiting for " + state_->peers +
                  ": a peer died, hangs, or did not call " + state_->op +
                  ". The communicator is aborted; create a new one to continue.");
}

bool Request::completed() const {
    if (!state_) return false;
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->done;
}

const std::string& Request::op_name() const {
    static const std::string empty;
    return state_ ? state_->op : empty;
}

}  // namespace ccl_core
