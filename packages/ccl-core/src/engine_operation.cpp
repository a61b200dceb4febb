// Waiting on an engine's operations: the poll/yield/sleep loop, timeouts, dead peers and failures (engine.hpp).
#include <ccl_core/oneccl/engine.hpp>

#include <sched.h>

#include <thread>

namespace ccl_core {

EngineOperation::EngineOperation(std::shared_ptr<Engine> engine, std::string op, std::string peers,
                                 std::function<void()> finish)
    : engine_(std::move(engine)), op_(std::move(op)), peers_(std::move(peers)), finish_(std::move(finish)) {}

void EngineOperation::fail(std::exception_ptr error, const std::string& abort_reason) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!failure_) failure_ = error;
        error = failure_;
    }
    // only now: a thread that tests this op once the engine is aborted must find the op's own failure
    engine_->abort(abort_reason);
    std::rethrow_exception(error);
}

void EngineOperation::check_local_peers() {
    const std::string dead = engine_->dead_local_peer();
    if (dead.empty()) return;
    fail(std::make_exception_ptr(BackendError(op_ + " on " + engine_->describe() + ": " + dead + " on this host died; "
                                              "the communicator is aborted; create a new one to continue.")),
         dead + " died during " + op_);
}

void EngineOperation::move_in_background() {
    if (!completed()) progress_in_background(shared_from_this());
}

bool EngineOperation::poll_in_background() {
    try {
        if (engine_->waiters.load(std::memory_order_relaxed) > 0) return completed();  // its caller drives it
        if (test()) return true;
        const auto now = std::chrono::steady_clock::now();
        if (now - issued_ >= engine_->options().timeout) {
            expire(engine_->options().timeout);
            return true;
        }
        if (now >= next_peer_check_) {
            next_peer_check_ = now + std::chrono::milliseconds(200);
            check_local_peers();
        }
        return false;
    } catch (const std::exception&) {
        return true;  // kept in `failure_` for the op's caller
    }
}

bool EngineOperation::sleep_in_background(std::chrono::microseconds limit) {
    // a caller drives the engine (its wait sleeps, not this thread), or there is nothing to sleep on
    if (engine_->waiters.load() > 0 || !sleeps_on_peers()) return false;
    sleep_on_peers([] { return false; }, limit);
    return true;
}

bool EngineOperation::test() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (done_) return true;
    if (failure_) std::rethrow_exception(failure_);
    engine_->throw_if_aborted(op_.c_str());
    bool ready = false;
    try {
        ready = step();
    } catch (const InvalidArgument& e) {  // the ranks disagree: their sequence of operations is out of step now
        lock.unlock();
        fail(std::make_exception_ptr(
                 InvalidArgument(std::string(e.what()) + ". The communicator is aborted; create a new one to continue.")),
             op_ + " was called differently on different ranks");
    } catch (const std::exception& e) {
        lock.unlock();
        fail(std::make_exception_ptr(
                 BackendError(op_ + " on " + engine_->describe() + " failed" + engine_name() + ": " + e.what())),
             op_ + " failed");
    }
    if (!ready) return false;
    if (finish_) finish_();
    done_ = true;
    return true;
}

void EngineOperation::wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) {
    // Ordered on a device queue, an issued op needs no waiting: later work on that queue follows it.
    const bool until_issued = !engine_->settings().wait_for_completion;
    struct Waiting {  // announces this wait to the progress thread (see Engine::waiters)
        std::atomic<int>& count;
        explicit Waiting(std::atomic<int>& c) : count(c) { ++count; }
        ~Waiting() { --count; }
    } waiting(engine_->waiters);
    const auto limit = timeout.value_or(engine_->options().timeout);
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + limit;
    auto next_callback = start + std::chrono::milliseconds(50);
    auto next_peer_check = start + std::chrono::milliseconds(200);
    // Spin first: small messages complete in microseconds. Then give the core away:
    // - when every rank has a core of its own, yield between polls. Sleeping would be worse: the scheduler tends
    //   to wake a sleeper on its waker's core, and two ranks sharing a core hand it back and forth at every step.
    //   Ranks that keep polling look busy, and the load balancer keeps them on cores of their own.
    // - when ranks outnumber cores, sleep: ops with something to sleep on (the shared-memory path's futex) until a
    //   peer publishes progress, oneCCL operations in short naps (without oneCCL's worker thread a peer progresses
    //   only while it runs).
    // - ops that can sleep on their peers also sleep once a wait has lasted a millisecond (the peer is busy elsewhere).
    // - any operation sleeps at once when a peer last noted this core as its own (ranks of an all-local group note
    //   their cores in the shared segment while they wait): the peer cannot progress until this rank gives the core
    //   away, and a yield hands it over only after ~100-300 µs here.
    // - oneCCL operations stop yielding after 20 ms (a peer is late, or the op is long): then they nap, 20 µs
    //   growing to 1 ms, after 0.2 s to 20 ms and after 2 s to 50 ms, so that waiting for a late peer costs almost
    //   no CPU (a poll of oneCCL costs 50-100 µs here). Each wake still polls, which is what moves oneCCL without
    //   its worker thread: a transfer longer than 20 ms loses up to 1 ms per step, one longer than 0.2 s up to 20 ms.
    constexpr auto kSpin = std::chrono::microseconds(50);
    constexpr auto kSpinOversubscribed = std::chrono::microseconds(2);
    constexpr auto kYieldBeforeSleeping = std::chrono::milliseconds(1);  // ops that can sleep on their peers
    constexpr auto kYieldBeforeNapping = std::chrono::milliseconds(20);   // oneCCL ops
    constexpr auto kMinNap = std::chrono::microseconds(20);
    constexpr auto kMaxNap = std::chrono::microseconds(1000);
    constexpr auto kMaxLateNap = std::chrono::microseconds(20000);
    constexpr auto kMaxVeryLateNap = std::chrono::microseconds(50000);
    constexpr auto kPeerSleep = std::chrono::milliseconds(10);
    constexpr auto kHopelessPeerSleep = std::chrono::milliseconds(50);
    const bool oversubscribed = engine_->oversubscribed();
    LocalPath* board = engine_->local_path();  // where same-host ranks note their cores
    if (board) board->note_my_core();
    const bool can_sleep = sleeps_on_peers();
    const auto spin_until = start + (oversubscribed ? kSpinOversubscribed : kSpin);
    const auto yield_until = oversubscribed ? start : start + (can_sleep ? kYieldBeforeSleeping : kYieldBeforeNapping);
    auto nap = kMinNap;
    const auto late = start + std::chrono::milliseconds(20);  // from here on naps grow (oversubscribed ranks too)
    const auto very_late = start + std::chrono::milliseconds(200);
    const auto hopeless = start + std::chrono::milliseconds(2000);
    bool spinning = true;
    auto ready = [&] {
        if (!until_issued) return test();
        if (!issued()) return false;
        (void)test();  // raises the op's failure, if its call failed
        return true;
    };
    for (unsigned i = 0;; ++i) {
        if (ready()) return;
        if (spinning && (i & 15) != 0) continue;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) break;
        spinning = spinning && now < spin_until;
        // a peer on this core cannot run while this rank polls (the scheduler often leaves two ranks on one core)
        if (board) board->note_my_core();
        const bool share_core = board && board->peer_on_my_core();
        if (!spinning || share_core) {
            if (now < yield_until && !share_core) {
                ::sched_yield();
            } else if (can_sleep) {
                sleep_on_peers([this] { return test(); }, now >= hopeless ? kHopelessPeerSleep : kPeerSleep);
            } else {
                std::this_thread::sleep_for(nap);  // oneCCL publishes nothing to sleep on
                const auto cap = now >= hopeless ? kMaxVeryLateNap : now >= very_late ? kMaxLateNap : kMaxNap;
                if (now >= late) nap = std::min(nap * 2, cap);
            }
        }
        if (now >= next_peer_check) {
            // a same-host peer that died never completes the op: say so now rather than at the timeout
            next_peer_check = now + std::chrono::milliseconds(200);
            check_local_peers();
        }
        if (every_50ms && now >= next_callback) {
            next_callback = now + std::chrono::milliseconds(50);
            try {
                every_50ms();
            } catch (...) {
                engine_->abort(op_ + " was interrupted while waiting");
                throw;
            }
        }
    }
    expire(limit);
}

void EngineOperation::expire(std::chrono::milliseconds waited) {
    fail(std::make_exception_ptr(Timeout(op_ + " on " + engine_->describe() + " did not complete within " +
                                         std::to_string(waited.count()) + " ms; waiting for " + peers_ +
                                         ": a peer died, hangs, or did not call " + op_ +
                                         ". The communicator is aborted; create a new one to continue.")),
         op_ + " timed out after " + std::to_string(waited.count()) + " ms");
}

bool EngineOperation::completed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
}

// ---- operations that oneCCL runs ----------------------------------------------------------------------------

OneCclOperation::OneCclOperation(std::shared_ptr<Engine> engine, std::string op, std::string peers,
                                 std::function<void()> finish, ccl::event event)
    : EngineOperation(std::move(engine), std::move(op), std::move(peers), std::move(finish)), event_(std::move(event)) {}

OneCclOperation::~OneCclOperation() {
    if (!completed()) new ccl::event(std::move(event_));  // deliberately never destroyed
}

bool OneCclOperation::step() {
    if (LocalPath* path = engine()->local_path()) path->drive();
    if (!issued()) return false;  // its blocking call has not returned yet
    if (call_failure_) {
        try {
            std::rethrow_exception(call_failure_);
        } catch (const Error&) {
            throw;
        } catch (const std::exception& e) {
            throw BackendError(std::string("oneCCL refused the operation: ") + e.what());
        }
    }
    std::lock_guard<std::mutex> lock(engine_mutex());
    return event_.test();  // also drives progress: oneCCL runs without a worker thread (CCL_WORKER_OFFLOAD=0)
}

}  // namespace ccl_core
