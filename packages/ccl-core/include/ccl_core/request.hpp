// A collective in flight. test() never blocks; wait() returns when the operation finished or throws Timeout
// naming the operation and ranks, so a dead peer surfaces as an error instead of a hang.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ccl_core {

class Request {
public:
    class State;  // defined in src/request.cpp; holds the oneCCL event
    explicit Request(std::shared_ptr<State> state);
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

private:
    std::shared_ptr<State> state_;
};

}  // namespace ccl_core
