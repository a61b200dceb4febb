// The progress of operations in flight, and who owns it (src/progress/).
//
// Progress has one owner per operation at a time: the caller inside test()/wait(), or else ccl-core's progress
// thread (one per process), which moves async operations while their caller computes, completes operations that
// nobody will wait on (torch futures, requests dropped before they finished) and keeps their buffers alive meanwhile.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ccl_core {

// What a Request waits for. ccl-core's engine implements it for oneCCL's events and the shared-memory path;
// ccl-torch for a torch work made of several requests.
class PendingOperation {
public:
    virtual ~PendingOperation() = default;
    // True once the operation (and any finishing step) is done. Never blocks. Raises the operation's failure, and
    // is where its deadline is enforced: past it, the operation fails with Timeout (and its engine aborts).
    virtual bool test() = 0;
    // Waits up to `timeout` (the operation's own when absent); `every_50ms` runs periodically while waiting.
    virtual void wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) = 0;
    // True once done successfully; never raises.
    virtual bool completed() const = 0;
    virtual const std::string& op_name() const = 0;
    // The operation's deadline becomes its issue time plus `timeout` (a per-op timeout: torch's opts.timeout).
    virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
    // For the progress thread, between its rounds: sleeps until a peer may have moved the operation (at most
    // `limit`) and returns true, or returns false at once when there is nothing to sleep on (the thread then naps).
    virtual bool sleep_in_background(std::chrono::microseconds limit) {
        (void)limit;
        return false;
    }
    // The longest nap a poller may take between two polls of this operation once it has waited `waited`; zero for
    // no limit beyond the shared schedule (backoff.hpp). A transfer between hosts moves only while it is polled.
    virtual std::chrono::microseconds nap_limit(std::chrono::steady_clock::duration waited) const {
        (void)waited;
        return std::chrono::microseconds(0);
    }
    // True while a caller's wait drives this operation's engine: the progress thread then leaves it alone (two
    // pollers of the same engine only compete for the cores).
    virtual bool driven_by_a_caller() const { return false; }
};

// What the progress thread does when an operation it completes is through.
struct Completion {
    // Runs on the progress thread with nullptr on success, else the operation's failure.
    std::function<void(std::exception_ptr)> done;
    // Buffers the operation reads or writes, kept alive until it is through. Released after `done` on success;
    // after a failure never released (the operation may still write into them: oneCCL cannot cancel it).
    std::shared_ptr<void> hold;
};

// Has the progress thread poll `op` while its caller computes (async ops), as long as someone holds `op`.
// Nothing with CCL_CORE_PROGRESS=caller: ops then move only inside test()/wait().
void progress_in_background(const std::shared_ptr<PendingOperation>& op);
// Hands `op` to the progress thread for good: it drives `op` to the end (whatever CCL_CORE_PROGRESS says, since
// nobody else will), then runs `completion`. For torch futures, and for requests dropped before they finished.
void complete_in_background(std::shared_ptr<PendingOperation> op, Completion completion);
// From now on the progress thread runs no Completion::done and releases no Completion::hold: both may touch Python
// objects, which must not happen once the interpreter is shutting down. Python faces call it at exit. Waits for a
// completion that is running; returns at once in a process that never started the thread.
void stop_completions();
// How async operations move: "thread" (default) or "caller", from CCL_CORE_PROGRESS; throws InvalidArgument for
// anything else.
std::string progress_mode();

// True on ccl-core's progress thread. The thread polls operations that their callers may drop meanwhile, so it can
// end up holding the last reference to one. What must not be destroyed there checks this in its destructor and hands
// itself to release_on_a_user_thread: tensors and other Python objects (their release takes Python's lock, which a
// thread cannot take while the interpreter shuts down: it exits instead, and the process aborts), and communicators
// (their destruction is collective).
bool on_progress_thread();
// Keeps `leftover` until a user's thread next issues an operation or makes a request, which destroys it; at the
// process's exit it is never destroyed.
void release_on_a_user_thread(std::shared_ptr<void> leftover);

}  // namespace ccl_core
