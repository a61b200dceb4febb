// The operations of an engine (engine.hpp): the wait loop, the deadline, abort, Ctrl-C and dead-peer checks live in
// EngineOperation; a kind of operation says only how to poll it once (step) and whether it has something to sleep on.
#pragma once

#include <ccl_core/oneccl/engine.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace ccl_core {

// Every call into oneCCL's executor (issuing an op, testing an event) holds this lock. Without its worker thread
// the executor is driven by whichever thread polls; two threads (a caller and the progress thread, or two groups
// driven from two threads, host or device) must not drive it at once.
std::mutex& engine_mutex();

class EngineOperation : public PendingOperation, public std::enable_shared_from_this<EngineOperation> {
public:
    using Clock = std::chrono::steady_clock;
    EngineOperation(std::shared_ptr<Engine> engine, std::string op, std::string peers, std::function<void()> finish);
    // Let go on the progress thread (its caller dropped it meanwhile), it hands its engine to a user's thread: the
    // engine may go with it, and destroying one is collective.
    ~EngineOperation() override;

    bool test() override;
    void wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) override;
    bool completed() const override;
    const std::string& op_name() const override { return op_; }
    void set_timeout(std::chrono::milliseconds timeout) override;
    bool sleep_in_background(std::chrono::microseconds limit) override;
    std::chrono::microseconds nap_limit(Clock::duration waited) const override;
    bool driven_by_a_caller() const override;
    const std::shared_ptr<Engine>& engine() const { return engine_; }

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
    // Whether oneCCL has the op: false while a blocking call still issues it (EngineSettings::calls_block).
    virtual bool issued() const { return true; }
    // Whether polling this op drives oneCCL (else only the same-host path): see Engine::oneccl_waiters.
    virtual bool moves_through_oneccl() const { return true; }
    // " in oneCCL" for messages of failed steps.
    virtual const char* failing_layer() const { return " in oneCCL"; }

private:
    // Keeps `error` as this op's failure (the first one wins), aborts the engine for `abort_reason`, and throws it.
    [[noreturn]] void fail(std::exception_ptr error, const std::string& abort_reason, AbortCause cause);
    // The one place where an operation runs out of time: fails it with the Timeout that names the op, the ranks
    // waited for and `allowed`.
    [[noreturn]] void expire(std::chrono::milliseconds allowed);
    // Called by every poll that did not complete: fails the op past its deadline, or when a same-host peer died
    // (checked every 200 ms: it would never complete the op).
    void check_health(Clock::time_point now);
    Clock::time_point deadline() const;

    std::shared_ptr<Engine> engine_;
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

// An operation that oneCCL runs, done when its event is.
class OneCclOperation final : public EngineOperation {
public:
    OneCclOperation(std::shared_ptr<Engine> engine, std::string op, std::string peers, std::function<void()> finish,
                    ccl::event event);
    // ccl::event's destructor waits for the operation; after a timeout it would wait for ever.
    ~OneCclOperation() override;

private:
    friend class Engine;
    bool step() override;
    bool issued() const override { return issued_.load(std::memory_order_acquire); }
    // Runs oneCCL's call (on the blocking-call thread, see EngineSettings::calls_block).
    void call(const StartOneCcl& start);

    ccl::event event_;
    std::atomic<bool> issued_{true};  // false while its call waits for, or runs on, the blocking-call thread
    std::exception_ptr call_failure_;  // what that call threw, set before issued_
};

}  // namespace ccl_core
