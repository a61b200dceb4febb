#include "communicator_impl.hpp"
#include "progress_thread.hpp"

#include <sched.h>

#include <thread>

namespace ccl_core {

bool Request::test() {
    if (!op_) throw InvalidArgument("test() on an empty Request");
    return op_->test();
}

void Request::wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) {
    if (!op_) throw InvalidArgument("wait() on an empty Request");
    op_->wait(timeout, every_50ms);
}

bool Request::completed() const { return op_ && op_->completed(); }

void Request::expire(std::chrono::milliseconds waited) {
    if (!op_) throw InvalidArgument("expire() on an empty Request");
    if (op_->test()) return;
    op_->expire(waited);
}

void progress_in_background(const std::shared_ptr<PendingOperation>& op) {
    if (auto* progress = detail::ProgressThread::instance()) progress->watch(op);
}

void Request::move_in_background() {
    if (!op_) throw InvalidArgument("move_in_background() on an empty Request");
    op_->move_in_background();
}

const std::string& Request::op_name() const {
    static const std::string empty;
    return op_ ? op_->op_name() : empty;
}

namespace detail {

void EngineOperation::fail(std::exception_ptr error) {
    {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = error;
        error = failure;
    }
    std::rethrow_exception(error);
}

void EngineOperation::check_local_peers() {
    const std::string dead = comm->dead_local_peer();
    if (dead.empty()) return;
    comm->abort(dead + " died during " + op);
    fail(std::make_exception_ptr(BackendError(op + " on " + comm->describe() + ": " + dead + " on this host died; "
                                              "the communicator is aborted; create a new one to continue.")));
}

void EngineOperation::move_in_background() {
    if (!completed()) progress_in_background(shared_from_this());
}

bool EngineOperation::poll_in_background() {
    try {
        if (comm->waiters.load(std::memory_order_relaxed) > 0) return completed();  // its caller drives it
        if (test()) return true;
        const auto now = std::chrono::steady_clock::now();
        if (now - issued >= comm->options.timeout) {
            expire(comm->options.timeout);
            return true;
        }
        if (now >= next_peer_check) {
            next_peer_check = now + std::chrono::milliseconds(200);
            check_local_peers();
        }
        return false;
    } catch (const std::exception&) {
        return true;  // kept in `failure` for the op's caller
    }
}

bool EngineOperation::test() {
    EngineOperation& s = *this;
    std::unique_lock<std::mutex> lock(s.mutex);
    if (s.done) return true;
    if (s.failure) std::rethrow_exception(s.failure);
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
        lock.unlock();
        fail(std::make_exception_ptr(
            InvalidArgument(std::string(e.what()) + ". The communicator is aborted; create a new one to continue.")));
    } catch (const std::exception& e) {
        s.comm->abort(s.op + " failed");
        lock.unlock();
        fail(std::make_exception_ptr(BackendError(s.op + " on " + s.comm->describe() + " failed" +
                                                  (s.shm_op ? ": " : " in oneCCL: ") + e.what())));
    }
    if (!ready) return false;
    if (s.finish) s.finish();
    s.done = true;
    return true;
}

void EngineOperation::wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) {
    struct Waiting {  // announces this wait to the progress thread (see Impl::waiters)
        std::atomic<int>& count;
        explicit Waiting(std::atomic<int>& c) : count(c) { ++count; }
        ~Waiting() { --count; }
    } waiting(comm->waiters);
    const auto limit = timeout.value_or(comm->options.timeout);
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + limit;
    auto next_callback = start + std::chrono::milliseconds(50);
    auto next_peer_check = start + std::chrono::milliseconds(200);
    // Spin first: small messages complete in microseconds. Then give the core away:
    // - when every rank has a core of its own, yield between polls. Sleeping would be worse: the scheduler tends
    //   to wake a sleeper on its waker's core, and two ranks sharing a core hand it back and forth at every step.
    //   Ranks that keep polling look busy, and the load balancer keeps them on cores of their own.
    // - when ranks outnumber cores, sleep: shared-memory operations on a futex until a peer publishes progress,
    //   oneCCL operations in short naps (without oneCCL's worker thread a peer progresses only while it runs).
    // - shared-memory operations also sleep once a wait has lasted a millisecond (the peer is busy elsewhere).
    // - any operation sleeps at once when a peer last noted this core as its own (ranks of an all-local group note
    //   their cores in the shared segment while they wait): the peer cannot progress until this rank gives the core
    //   away, and a yield hands it over only after ~100-300 µs here.
    // - oneCCL operations stop yielding after 20 ms (a peer is late, or the op is long): then they nap, 20 µs
    //   growing to 1 ms, after 0.2 s to 20 ms and after 2 s to 50 ms, so that waiting for a late peer costs almost
    //   no CPU (a poll of oneCCL costs 50-100 µs here). Each wake still polls, which is what moves oneCCL without
    //   its worker thread: a transfer longer than 20 ms loses up to 1 ms per step, one longer than 0.2 s up to 20 ms.
    const bool oversubscribed = comm->oversubscribed;
    detail::ShmCollectives* shm = shm_op ? comm->shm.get() : nullptr;
    detail::ShmCollectives* board = comm->shm.get();  // where same-host ranks note their cores
    if (board) board->note_my_core();
    const auto spin_until = start + std::chrono::microseconds(oversubscribed ? 2 : 50);
    const auto yield_until = oversubscribed ? start : start + std::chrono::milliseconds(shm ? 1 : 20);
    constexpr auto kMinNap = std::chrono::microseconds(20);
    constexpr auto kMaxNap = std::chrono::microseconds(1000);
    constexpr auto kMaxLateNap = std::chrono::microseconds(20000);
    constexpr auto kMaxVeryLateNap = std::chrono::microseconds(50000);
    auto nap = kMinNap;
    const auto late = start + std::chrono::milliseconds(20);     // from here on naps grow (oversubscribed ranks too)
    const auto very_late = start + std::chrono::milliseconds(200);
    const auto hopeless = start + std::chrono::milliseconds(2000);
    bool spinning = true;
    for (unsigned i = 0;; ++i) {
        if (test()) return;
        if (spinning && (i & 15) != 0) continue;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) break;
        spinning = spinning && now < spin_until;
        // a peer on this core cannot run while this rank polls (the scheduler often leaves two ranks on one core)
        if (board) board->note_my_core();
        const bool share_core = board && board->peer_on_my_core();
        if (!spinning || share_core) {
            if (now < yield_until && !share_core) ::sched_yield();
            else if (shm) shm->sleep_unless([this] { return test(); }, std::chrono::milliseconds(now >= hopeless ? 50 : 10));
            else {
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
                comm->abort(op + " was interrupted while waiting");
                throw;
            }
        }
    }
    expire(limit);
}

void EngineOperation::expire(std::chrono::milliseconds waited) {
    const std::string reason = op + " timed out after " + std::to_string(waited.count()) + " ms";
    comm->abort(reason);
    fail(std::make_exception_ptr(Timeout(op + " on " + comm->describe() + " did not complete within " +
                                         std::to_string(waited.count()) + " ms; waiting for " + peers +
                                         ": a peer died, hangs, or did not call " + op +
                                         ". The communicator is aborted; create a new one to continue.")));
}

bool EngineOperation::completed() const {
    std::lock_guard<std::mutex> lock(mutex);
    return done;
}

}  // namespace detail

}  // namespace ccl_core
