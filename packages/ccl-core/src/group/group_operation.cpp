// Waiting on a group's operations: the caller's wait, the deadline, dead peers and failures (group_operation.hpp).
#include "group_operation.hpp"

#include "local_path.hpp"

#include "../progress/progress_thread.hpp"
#include "../testing/sigint_points.hpp"

#include <ccl_core/backoff.hpp>

#include <algorithm>

namespace ccl_core {

GroupOperation::GroupOperation(std::shared_ptr<Group> group, std::string op, std::string peers,
                               std::function<void()> finish)
    : group_(std::move(group)), op_(std::move(op)), peers_(std::move(peers)), finish_(std::move(finish)),
      timeout_(group_->options().timeout) {
    detail::release_completed_operations();  // the caller's thread: see ProgressThread's graveyard
    detail::sigint_point(detail::SigintPoint::issue);
}

GroupOperation::~GroupOperation() {
    if (on_progress_thread()) release_on_a_user_thread(std::move(group_));
}

void GroupOperation::fail(std::exception_ptr error, const std::string& abort_reason, AbortCause cause) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!failure_) failure_ = error;
        error = failure_;
    }
    // only now: a thread that tests this op once the group is aborted must find the op's own failure
    group_->abort(abort_reason, cause);
    std::rethrow_exception(error);
}

void GroupOperation::expire(std::chrono::milliseconds allowed) {
    fail(std::make_exception_ptr(Timeout(op_ + " on " + group_->describe() + " did not complete within " +
                                         std::to_string(allowed.count()) + " ms; waiting for " + peers_ +
                                         ": a peer died, hangs, or did not call " + op_ +
                                         ". The communicator is aborted; create a new one to continue." +
                                         group_->explain_failure(op_))),
         op_ + " timed out after " + std::to_string(allowed.count()) + " ms", AbortCause::timeout);
}

void GroupOperation::set_timeout(std::chrono::milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mutex_);
    timeout_ = timeout;
}

GroupOperation::Clock::time_point GroupOperation::deadline() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return issued_at_ + timeout_;
}

void GroupOperation::check_health(Clock::time_point now) {
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
    const std::string dead = group_->dead_local_peer();
    if (dead.empty()) return;
    fail(std::make_exception_ptr(BackendError(op_ + " on " + group_->describe() + ": " + dead + " on this host died; "
                                              "the communicator is aborted; create a new one to continue.")),
         dead + " died during " + op_, AbortCause::peer_died);
}

bool GroupOperation::driven_by_a_caller() const { return group_->driven_by_a_caller(moves_through_oneccl()); }

// Between hosts oneCCL moves a large message in steps, each waiting for a poll on both sides, so naps of milliseconds
// starve the link (docs/performance.md, "Across hosts"). For its first 2 s, every poller of an op across hosts (a
// caller's wait, the progress thread) keeps its naps under 0.5 ms.
constexpr std::chrono::microseconds kTransferWindow(2000000);
constexpr std::chrono::microseconds kTransferNap(500);

std::chrono::microseconds GroupOperation::nap_limit(Clock::duration waited) const {
    const bool across_hosts = group_->local_ranks() < group_->size();
    return across_hosts && waited < kTransferWindow ? kTransferNap : std::chrono::microseconds(0);
}

bool GroupOperation::sleep_in_background(std::chrono::microseconds limit) {
    // a caller drives the group (its wait sleeps, not this thread), or there is nothing to sleep on
    if (driven_by_a_caller() || !sleeps_on_peers()) return false;
    sleep_on_peers([] { return false; }, limit);
    return true;
}

bool GroupOperation::test() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (done_) return true;
    if (failure_) std::rethrow_exception(failure_);
    group_->throw_if_aborted(op_.c_str());
    bool ready = false;
    try {
        ready = step();
    } catch (const InvalidArgument& e) {  // the ranks disagree: their sequence of operations is out of step now
        lock.unlock();
        fail(std::make_exception_ptr(InvalidArgument(std::string(e.what()) + ". The communicator is aborted; create "
                                                     "a new one to continue." + group_->explain_failure(op_))),
             op_ + " was called differently on different ranks", AbortCause::failed);
    } catch (const std::exception& e) {
        lock.unlock();
        fail(std::make_exception_ptr(
                 BackendError(op_ + " on " + group_->describe() + " failed" + failing_layer() + ": " + e.what())),
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

bool GroupOperation::wait_is_over() {
    if (!done_once_issued()) return test();
    // Ordered on a device queue, an issued op needs no waiting: later work on that queue follows it.
    if (!issued()) {
        check_health(Clock::now());
        return false;
    }
    (void)test();  // raises the op's failure, if its call failed
    return true;
}

namespace {

// How a wait gives the cores away (backoff.hpp), beyond the shared schedule:
// - when ranks outnumber cores, nap at once: ops with something to sleep on (the shared-memory path's futex) until a
//   peer publishes progress, oneCCL operations in short naps (without oneCCL's worker thread a peer progresses only
//   while it runs);
// - ops that can sleep on their peers sleep once a wait has lasted a millisecond (the peer is busy elsewhere);
//   oneCCL operations yield for 10 ms (a transfer runs), then nap: oneCCL publishes nothing to sleep on, and each
//   wake polls, which is what moves oneCCL without its worker thread (a yield that finds the other cores idle returns
//   at once, so yielding costs a core: it is kept short);
// - any operation naps at once when a peer last noted this core as its own (Backoff::Sleep::hand_over_core).
BackoffPhases wait_schedule(bool oversubscribed, bool can_sleep, std::chrono::microseconds transfer_nap) {
    using std::chrono::microseconds;
    BackoffPhases phases;
    if (oversubscribed) {
        phases.spin = microseconds(2);
        phases.short_naps = microseconds(20000);
    } else {
        phases.spin = microseconds(50);
        phases.yield = can_sleep ? microseconds(1000) : microseconds(10000);
    }
    if (transfer_nap.count() > 0) {  // across hosts (nap_limit)
        phases.transfer = kTransferWindow;
        phases.transfer_nap = transfer_nap;
    }
    return phases;
}

}  // namespace

void GroupOperation::wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) {
    detail::sigint_point(detail::SigintPoint::wait);
    const Group::Waiting waiting(*group_, moves_through_oneccl());
    const auto start = Clock::now();
    auto next_callback = start + std::chrono::milliseconds(50);
    Backoff backoff(wait_schedule(group_->oversubscribed(), sleeps_on_peers(), nap_limit(Clock::duration(0))), start);
    Backoff::Sleep how;
    if (sleeps_on_peers()) {
        how.on_peers = [this](std::chrono::microseconds limit) {
            sleep_on_peers([this] { return test(); }, limit);
            return true;
        };
    }
    LocalPath* board = group_->local_path();  // where same-host ranks note their cores
    if (board) board->note_my_core();
    bool spinning = true;
    for (unsigned i = 0;; ++i) {
        if (wait_is_over()) return;
        if (spinning && (i & 15) != 0) continue;  // the clock is read every 16th poll while spinning
        const auto now = Clock::now();
        if (timeout && now - start >= *timeout) expire(*timeout);  // the caller's own limit
        // a nap never outlasts the op's deadline or the caller's limit: a timeout is raised on time
        how.until = timeout ? std::min(deadline(), start + *timeout) : deadline();
        // a peer on this core cannot run while this rank polls (the scheduler often leaves two ranks on one core)
        if (board) board->note_my_core();
        how.hand_over_core = board && board->peer_on_my_core();
        spinning = !how.hand_over_core && backoff.step(now) == Backoff::Step::spin;
        backoff.pause(now, how);
        if (every_50ms && now >= next_callback) {
            next_callback = now + std::chrono::milliseconds(50);
            try {
                every_50ms();
            } catch (...) {
                group_->abort(op_ + " was interrupted while waiting");
                throw;
            }
        }
    }
}

bool GroupOperation::completed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
}

}  // namespace ccl_core
