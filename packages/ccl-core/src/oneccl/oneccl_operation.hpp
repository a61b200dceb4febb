// An operation that oneCCL runs (engine.hpp): done when its event is; the wait and its checks are GroupOperation's.
#pragma once

#include "../group/group_operation.hpp"

#include <ccl_core/oneccl/engine.hpp>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

namespace ccl_core {

// Every call into oneCCL's executor (issuing an op, testing an event) holds this lock. Without its worker thread
// the executor is driven by whichever thread polls; two threads (a caller and the progress thread, or two groups
// driven from two threads, host or device) must not drive it at once.
std::mutex& engine_mutex();

class OneCclOperation final : public GroupOperation {
public:
    OneCclOperation(std::shared_ptr<Engine> engine, std::string op, std::string peers, std::function<void()> finish,
                    ccl::event event);
    // ccl::event's destructor waits for the operation; after a timeout it would wait for ever.
    ~OneCclOperation() override;

private:
    friend class Engine;
    bool step() override;
    bool issued() const override { return issued_.load(std::memory_order_acquire); }
    bool done_once_issued() const override { return !engine_->settings().wait_for_completion; }
    // Runs oneCCL's call (on the blocking-call thread, see EngineSettings::calls_block).
    void call(const StartOneCcl& start);

    std::shared_ptr<Engine> engine_;
    ccl::event event_;
    std::atomic<bool> issued_{true};  // false while its call waits for, or runs on, the blocking-call thread
    std::exception_ptr call_failure_;  // what that call threw, set before issued_
};

// How many of an engine's calls the blocking-call thread still holds (Engine::settle_blocking_calls).
struct Engine::CallsHeld {
    std::mutex mutex;
    std::condition_variable none_left;
    int count = 0;
};

}  // namespace ccl_core
