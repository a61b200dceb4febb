// A collective in flight. test() never blocks; wait() returns when the operation finished or throws Timeout
// naming the operation and ranks, so a dead peer surfaces as an error instead of a hang.
#pragma once

#include <ccl_core/progress.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ccl_core {

class Request {
public:
    explicit Request(std::shared_ptr<PendingOperation> op) : op_(std::move(op)) {}
    Request() = default;

    // True once the operation (and any finishing step such as avg's division) is done.
    // Rethrows the operation's error; never blocks.
    bool test();
    // Waits up to `timeout` (the operation's timeout when absent). On timeout the communicator is marked aborted,
    // because oneCCL cannot cancel an operation a peer will never join. `every_50ms`, if given, runs periodically
    // while waiting (Python checks for Ctrl-C there); an exception it throws aborts the communicator and propagates.
    void wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt,
              const std::function<void()>& every_50ms = {});
    bool completed() const;
    const std::string& op_name() const;
    // See PendingOperation::set_timeout.
    void set_timeout(std::chrono::milliseconds timeout);
    // For a caller that will not wait right away (async_op=True): see progress_in_background. A blocking caller
    // skips it: its own wait drives the operation, and a thread woken for it would only cost a core.
    void move_in_background();
    // For a caller that will never wait: see complete_in_background.
    void complete_in_background(Completion completion);
    const std::shared_ptr<PendingOperation>& operation() const { return op_; }

private:
    std::shared_ptr<PendingOperation> op_;
};

}  // namespace ccl_core
