// An operation of a group, whichever path runs it (oneCCL, the shared-memory path, the hierarchy): the caller's wait,
// the deadline, abort, Ctrl-C and dead-peer checks live here; a kind of operation says only how to poll it once (step)
// and whether it has something to sleep on.
#pragma once

#include <ccl_core/group.hpp>
#include <ccl_core/progress.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace ccl_core {

class GroupOperation : public PendingOperation {
public:
    using Clock = std::chrono::steady_clock;
    GroupOperation(std::shared_ptr<Group> group, std::string op, std::string peers, std::function<void()> finish);
    // Let go on the progress thread (its caller dropped it meanwhile), it hands its group to a user's thread: the
    // group's communicator may go with it, and destroying one is collective.
    ~GroupOperation() override;

    bool test() override;
    void wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) override;
    bool completed() const override;
    const std::string& op_name() const override { return op_; }
    void set_timeout(std::chrono::milliseconds timeout) override;
    bool sleep_in_background(std::chrono::microseconds limit) override;
    std::chrono::microseconds nap_limit(Clock::duration waited) const override;
    bool driven_by_a_caller() const override;
    const std::shared_ptr<Group>& group() const { return group_; }

protected:
    // One poll: true once the transfer is complete. Throws on failure (InvalidArgument when the ranks disagree).
    virtual bool step() = 0;
    // Whether this kind of op has something to sleep on until a peer moves it (the shared-memory path's futex).
    virtual bool sleeps_on_peers() const { return false; }
    // If sleeps_on_peers(): sleeps until a peer may have moved this op, or `limit` passes, unless ready() holds.
    virtual void sleep_on_peers(const std::function<bool()>& ready, std::chrono::microseconds limit) {
        (void)ready;
        (void)limit;
    }
    // Whether the op has been handed to whatever runs it: false while a blocking oneCCL call still issues it
    // (EngineSettings::calls_block).
    virtual bool issued() const { return true; }
    // Whether a wait that only needs the op issued may return (EngineSettings::wait_for_completion).
    virtual bool done_once_issued() const { return false; }
    // Whether polling this op drives oneCCL (else only the same-host path): see Group::Waiting.
    virtual bool moves_through_oneccl() const { return true; }
    // " in oneCCL" for messages of failed steps.
    virtual const char* failing_layer() const { return " in oneCCL"; }

private:
    // Keeps `error` as this op's failure (the first one wins), aborts the group for `abort_reason`, and throws it.
    [[noreturn]] void fail(std::exception_ptr error, const std::string& abort_reason, AbortCause cause);
    // The one place where an operation runs out of time: fails it with the Timeout that names the op, the ranks
    // waited for and `allowed`.
    [[noreturn]] void expire(std::chrono::milliseconds allowed);
    // Called by every poll that did not complete: fails the op past its deadline, or when a same-host peer died
    // (checked every 200 ms: it would never complete the op).
    void check_health(Clock::time_point now);
    Clock::time_point deadline() const;
    // Whether the caller's wait may end: the op done (or, for done_once_issued(), issued), its failure raised.
    bool wait_is_over();

    std::shared_ptr<Group> group_;
    std::string op_;     // "allreduce"
    std::string peers_;  // "ranks 0-1", "rank 1": who must take part, for error messages
    std::function<void()> finish_;
    mutable std::mutex mutex_;
    bool done_ = false;
    std::exception_ptr failure_;  // raised again by every later test()/wait()
    const Clock::time_point issued_at_ = Clock::now();
    std::chrono::milliseconds timeout_;  // the deadline is issued_at_ + timeout_
    Clock::time_point next_peer_check_ = issued_at_ + std::chrono::milliseconds(200);
};

}  // namespace ccl_core
