// A collective in flight. test() never blocks; wait() returns when the operation finished or throws Timeout
// naming the operation and ranks, so a dead peer surfaces as an error instead of a hang.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ccl_core {

// What a Request waits for. ccl-core's communicator implements it over oneCCL events and its shared-memory
// path; device plugins (ccl-xpu) implement it over their own completion events.
class PendingOperation {
public:
    virtual ~PendingOperation() = default;
    virtual bool test() = 0;
    virtual void wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) = 0;
    virtual bool completed() const = 0;
    virtual const std::string& op_name() const = 0;
    // Gives up on an unfinished operation that someone else waited `waited` for (a thread polling it): aborts
    // and throws the Timeout that a wait of that length throws. The default waits one more millisecond.
    virtual void expire(std::chrono::milliseconds waited) {
        (void)waited;
        wait(std::chrono::milliseconds(1), {});
    }
    // Hands the operation to the process's progress thread (see Request::move_in_background). Default: nothing,
    // for engines that move on their own; others call progress_in_background(shared_from_this()).
    virtual void move_in_background() {}
    // One poll by the progress thread: true once the operation needs no more (complete, or failed: test() raises
    // the failure for its caller).
    virtual bool poll_in_background() {
        try {
            return test();
        } catch (...) {
            return true;
        }
    }
    // Between the progress thread's rounds: sleeps until a peer may have moved the operation (at most `limit`) and
    // returns true, or returns false at once when the engine has nothing to sleep on (the thread then naps).
    virtual bool sleep_in_background(std::chrono::microseconds limit) {
        (void)limit;
        return false;
    }
};

// Has the process's progress thread poll `op` until poll_in_background() says it is through (nothing with
// CCL_CORE_PROGRESS=caller). For the move_in_background() of an engine's own operations (device plugins).
void progress_in_background(const std::shared_ptr<PendingOperation>& op);

class Request {
public:
    explicit Request(std::shared_ptr<PendingOperation> op) : op_(std::move(op)) {}
    Request() = default;

    // True once the operation (and any finishing step such as avg's division) is done.
    // Rethrows the operation's error; never blocks.
    bool test();
    // Waits up to `timeout` (the communicator's timeout when absent). On timeout the communicator is
    // marked aborted, because oneCCL cannot cancel an operation a peer will never join.
    // `every_50ms`, if given, runs periodically while waiting (Python checks for Ctrl-C there); an exception
    // it throws aborts the communicator and propagates.
    void wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt,
              const std::function<void()>& every_50ms = {});
    bool completed() const;
    const std::string& op_name() const;
    // For a Request polled with test() until a deadline of the caller's: returns if it completed after all, else
    // aborts the communicator and throws Timeout naming `waited` (see PendingOperation::expire).
    void expire(std::chrono::milliseconds waited);
    // For a caller that will not wait right away (async_op=True): the process's progress thread drives the
    // operation meanwhile, so it moves while the caller computes (unless CCL_CORE_PROGRESS=caller). A blocking
    // caller skips it: its own wait drives the operation, and a thread woken for it would only cost a core.
    void move_in_background();

private:
    std::shared_ptr<PendingOperation> op_;
};

}  // namespace ccl_core
