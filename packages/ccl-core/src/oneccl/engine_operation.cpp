// Waiting on an engine's operations: the wait loop, the deadline, dead peers and failures (engine_operation.hpp).
#include "engine_operation.hpp"

#include "../progress/progress_thread.hpp"
#include "../shm/local_path.hpp"
#include "../testing/sigint_points.hpp"

#include <ccl_core/backoff.hpp>

#include <algorithm>
#include <thread>

#include <sched.h>

namespace ccl_core {

std::mutex& engine_mutex() {
    static std::mutex m;
    return m;
}

EngineOperation::EngineOperation(std::shared_ptr<Engine> engine, std::string op, std::string peers,
                                 std::function<void()> finish)
    : engine_(std::move(engine)), op_(std::move(op)), peers_(std::move(peers)), finish_(std::move(finish)),
      timeout_(engine_->options().timeout) {
    detail::release_completed_operations();  // the caller's thread: see ProgressThread's graveyard
    detail::sigint_point(detail::SigintPoint::issue);
}

EngineOperation::~EngineOperation() {
    if (on_progress_thread()) release_on_a_user_thread(std::move(engine_));
}

void EngineOperation::fail(std::exception_ptr error, const std::string& abort_reason, AbortCause cause) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!failure_) failure_ = error;
        error = failure_;
    }
    // only now: a thread that tests this op once the engine is aborted must find the op's own failure
    engine_->abort(abort_reason, cause);
    std::rethrow_exception(error);
}

void EngineOperation::expire(std::chrono::milliseconds allowed) {
    fail(std::make_exception_ptr(Timeout(op_ + " on " + engine_->describe() + " did not complete within " +
                                         std::to_string(allowed.count()) + " ms; waiting for " + peers_ +
                                         ": a peer died, hangs, or did not call " + op_ +
                                         ". The communicator is aborted; create a new one to continue." +
                                         engine_->explain_failure(op_))),
         op_ + " timed out after " + std::to_string(allowed.count()) + " ms", AbortCause::timeout);
}

void EngineOperation::set_timeout(std::chrono::milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mutex_);
    timeout_ = timeout;
}

EngineOperation::Clock::time_point EngineOperation::deadline() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return issued_at_ + timeout_;
}

void EngineOperation::check_health(Clock::time_point now) {
    std::chrono::milliseconds timeout;
    bool check_peers = false;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        timeout = timeout_;
        if (now >= next_peer_check_) {
            next_peer_check_ = now + std::chrono::milliseconds(200);
            check_peers = true;
        }
    }
    if (now - issued_at_ >= timeout) expire(timeout);
    if (!check_peers) return;
    const std::string dead = engine_->dead_local_peer();
    if (dead.empty()) return;
    fail(std::make_exception_ptr(BackendError(op_ + " on " + engine_->describe() + ": " + dead + " on this host died; "
                                              "the communicator is aborted; create a new one to continue.")),
         dead + " died during " + op_, AbortCause::peer_died);
}

bool EngineOperation::driven_by_a_caller() const {
    const int oneccl = engine_->oneccl_waiters.load(std::memory_order_relaxed);
    if (moves_through_oneccl()) return oneccl > 0;
    return oneccl + engine_->local_path_waiters.load(std::memory_order_relaxed) > 0;
}

// Between hosts oneCCL moves a large message in steps, each waiting for a poll on both sides: naps that grew to 5 and
// 25 ms halved the rate of a 2.5 Gbit/s link; under 0.5 ms it ran at the link's rate (64 MiB allreduce, 2 ranks:
// 505 ms against 231 ms). For its first 2 s, every poller of an op across hosts (a caller's wait, the progress
// thread) keeps its naps that short.
constexpr std::chrono::microseconds kTransferWindow(2000000);
constexpr std::chrono::microseconds kTransferNap(500);

std::chrono::microseconds EngineOperation::nap_limit(Clock::duration waited) const {
    const bool across_hosts = engine_->local_ranks() < engine_->size();
    return across_hosts && waited < kTransferWindow ? kTransferNap : std::chrono::microseconds(0);
}

bool EngineOperation::sleep_in_background(std::chrono::microseconds limit) {
    // a caller drives the engine (its wait sleeps, not this thread), or there is nothing to sleep on
    if (driven_by_a_caller() || !sleeps_on_peers()) return false;
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
        fail(std::make_exception_ptr(InvalidArgument(std::string(e.what()) + ". The communicator is aborted; create "
                                                     "a new one to continue." + engine_->explain_failure(op_))),
             op_ + " was called differently on different ranks", AbortCause::failed);
    } catch (const std::exception& e) {
        lock.unlock();
        fail(std::make_exception_ptr(
                 BackendError(op_ + " on " + engine_->describe() + " failed" + failing_layer() + ": " + e.what())),
             op_ + " failed", AbortCause::failed);
    }
    if (ready) {
        if (finish_) finish_();
        done_ = true;
        return true;
    }
    lock.unlock();
    check_health(Clock::now());
    return false;
}

void EngineOperation::wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) {
    // Ordered on a device queue, an issued op needs no waiting: later work on that queue follows it.
    const bool until_issued = !engine_->settings().wait_for_completion;
    detail::sigint_point(detail::SigintPoint::wait);
    struct Waiting {  // announces this wait to the progress thread (see Engine::oneccl_waiters)
        std::atomic<int>& count;
        explicit Waiting(std::atomic<int>& c) : count(c) { ++count; }
        ~Waiting() { --count; }
    } waiting(moves_through_oneccl() ? engine_->oneccl_waiters : engine_->local_path_waiters);
    const auto start = Clock::now();
    auto next_callback = start + std::chrono::milliseconds(50);
    // How this wait gives the cores away (backoff.hpp), beyond the shared schedule:
    // - when ranks outnumber cores, sleep at once: ops with something to sleep on (the shared-memory path's futex)
    //   until a peer publishes progress, oneCCL operations in short naps (without oneCCL's worker thread a peer
    //   progresses only while it runs);
    // - ops that can sleep on their peers sleep once a wait has lasted a millisecond (the peer is busy elsewhere);
    //   oneCCL operations yield for 10 ms (a transfer runs), then nap: oneCCL publishes nothing to sleep on, and
    //   each wake polls, which is what moves oneCCL without its worker thread (a yield that finds the other cores
    //   idle returns at once, so yielding costs a core: it is kept short);
    // - any operation sleeps at once when a peer last noted this core as its own (ranks of an all-local group note
    //   their cores in the shared segment while they wait): the peer cannot progress until this rank gives the core
    //   away, and a yield hands it over only late.
    const bool oversubscribed = engine_->oversubscribed();
    const bool can_sleep = sleeps_on_peers();
    using std::chrono::microseconds;
    Backoff::Phases phases;
    if (oversubscribed) {
        phases = {microseconds(2), microseconds(0), microseconds(20000)};
    } else {
        phases = {microseconds(50), can_sleep ? microseconds(1000) : microseconds(10000), microseconds(0)};
    }
    if (nap_limit(Clock::duration(0)).count() > 0) {  // across hosts (nap_limit)
        phases.transfer = kTransferWindow;
        phases.transfer_nap = nap_limit(Clock::duration(0));
    }
    Backoff backoff(phases, start);
    LocalPath* board = engine_->local_path();  // where same-host ranks note their cores
    if (board) board->note_my_core();
    auto ready = [&] {
        if (!until_issued) return test();
        if (!issued()) {
            check_health(Clock::now());
            return false;
        }
        (void)test();  // raises the op's failure, if its call failed
        return true;
    };
    bool spinning = true;
    for (unsigned i = 0;; ++i) {
        if (ready()) return;
        if (spinning && (i & 15) != 0) continue;
        const auto now = Clock::now();
        if (timeout && now - start >= *timeout) expire(*timeout);  // the caller's own limit
        // a nap never outlasts the op's deadline or the caller's limit: a timeout is raised on time
        auto end = deadline();
        if (timeout) end = std::min(end, start + *timeout);
        const auto left = std::chrono::duration_cast<microseconds>(end - now) + microseconds(1);
        const auto step = backoff.step(now);
        spinning = step == Backoff::Step::spin;
        // a peer on this core cannot run while this rank polls (the scheduler often leaves two ranks on one core)
        if (board) board->note_my_core();
        const bool share_core = board && board->peer_on_my_core();
        if (step == Backoff::Step::yield && !share_core) {
            ::sched_yield();
        } else if ((step == Backoff::Step::nap || share_core) && can_sleep) {
            sleep_on_peers([this] { return test(); }, std::min(Backoff::nap_cap(now - start), left));
        } else if (step == Backoff::Step::nap || share_core) {
            std::this_thread::sleep_for(std::min(backoff.next_nap(now), left));
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
