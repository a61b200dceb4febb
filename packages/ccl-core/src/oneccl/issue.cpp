// Issuing oneCCL operations on an engine (engine.hpp): under the engine lock, or on the blocking-call thread for
// engines whose calls run to completion inside oneCCL (EngineSettings::calls_block); and polling them.
#include "oneccl_operation.hpp"

#include "../group/local_path.hpp"
#include "../testing/blocking_call_hold.hpp"

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <thread>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

namespace ccl_core {

namespace {

// The thread that makes the calls of engines whose calls block (EngineSettings::calls_block), one after another in
// the order they were issued, as oneCCL requires of every rank. One per process, never destroyed (a call stuck on a
// dead peer never returns); a forked child makes its own.
// At the process's exit a call stuck on a dead peer would run on inside oneCCL while oneCCL's globals are destroyed,
// and crash the exit: the thread is parked first, in a signal handler that never returns.
class BlockingCallThread {
public:
    static BlockingCallThread& instance() {
        static std::mutex made;
        std::lock_guard<std::mutex> lock(made);
        if (!current_ || current_->owner_ != ::getpid()) {
            current_ = new BlockingCallThread();  // a forked child's own; the parent's stays behind
            static const bool parks_at_exit = std::atexit(park_if_in_call) == 0;
            (void)parks_at_exit;
        }
        return *current_;
    }
    void post(std::function<void()> call) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            calls_.push_back(std::move(call));
        }
        wake_.notify_one();
    }

private:
    BlockingCallThread() : owner_(::getpid()) {
        std::thread worker([this] { run(); });
        thread_ = worker.native_handle();
        worker.detach();
    }
    void run() {
        std::unique_lock<std::mutex> lock(mutex_);
        while (true) {
            wake_.wait(lock, [&] { return !calls_.empty(); });
            std::function<void()> call = std::move(calls_.front());
            calls_.pop_front();
            lock.unlock();
            in_call_.store(true);
            call();
            in_call_.store(false);
            call = nullptr;  // releases what it held before the next wait
            lock.lock();
        }
    }

    static void park(int) {
        parked_ = 1;
        for (;;) ::pause();
    }
    static void park_if_in_call() {
        BlockingCallThread* t = current_;
        if (!t || t->owner_ != ::getpid() || !t->in_call_.load()) return;
        struct sigaction action {};
        action.sa_handler = park;
        ::sigaction(park_signal(), &action, nullptr);
        ::pthread_kill(t->thread_, park_signal());
        for (int i = 0; i < 1000 && !parked_; ++i) ::usleep(100);  // bounded: the exit must go on
    }
    // a real-time signal that libraries seldom take (glibc keeps the first ones for itself)
    static int park_signal() { return SIGRTMIN + 7; }

    static inline BlockingCallThread* current_ = nullptr;
    static inline volatile std::sig_atomic_t parked_ = 0;
    const pid_t owner_;
    pthread_t thread_;
    std::atomic<bool> in_call_{false};
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::function<void()>> calls_;
};

}  // namespace

std::mutex& engine_mutex() {
    static std::mutex m;
    return m;
}

OneCclOperation::OneCclOperation(std::shared_ptr<Engine> engine, std::string op, std::string peers,
                                 std::function<void()> finish, ccl::event event)
    : GroupOperation(engine->group(), std::move(op), std::move(peers), std::move(finish)), engine_(std::move(engine)),
      event_(std::move(event)) {}

OneCclOperation::~OneCclOperation() {
    if (!completed()) new ccl::event(std::move(event_));  // deliberately never destroyed
    if (on_progress_thread()) release_on_a_user_thread(std::move(engine_));  // destroying one is collective
}

bool OneCclOperation::step() {
    if (LocalPath* path = group()->local_path()) path->drive();
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

void OneCclOperation::call(const StartOneCcl& start) {
    try {
        std::lock_guard<std::mutex> lock(engine_mutex());
        event_ = start(*engine_->comm_);
    } catch (...) {
        call_failure_ = std::current_exception();
    }
    issued_.store(true, std::memory_order_release);
}

Request Engine::issue(const char* op, std::string peers, StartOneCcl start, std::function<void()> finish) {
    group_->throw_if_aborted(op);
    if (settings_.calls_block) {
        auto operation = std::make_shared<OneCclOperation>(shared_from_this(), op, std::move(peers), std::move(finish),
                                                           ccl::event());
        operation->issued_.store(false);
        {
            std::lock_guard<std::mutex> lock(calls_held_->mutex);
            ++calls_held_->count;
        }
        // The call reports its end (issued_) before the thread lets go of it: what it holds is dropped here, and
        // only then counted out, so that settle_blocking_calls() knows when the engine is the owner's alone.
        BlockingCallThread::instance().post(
            [operation, start = std::move(start), held = calls_held_]() mutable {
                operation->call(start);
                if (const auto hold = detail::blocking_call_hold(); hold.count() > 0) std::this_thread::sleep_for(hold);
                start = nullptr;
                operation = nullptr;
                std::lock_guard<std::mutex> lock(held->mutex);
                if (--held->count == 0) held->none_left.notify_all();
            });
        return Request(operation);
    }
    ccl::event event;
    {
        std::lock_guard<std::mutex> lock(engine_mutex());
        try {
            event = start(*comm_);
        } catch (const Error&) {
            throw;  // ours (an argument check inside start): already names the problem
        } catch (const std::exception& e) {
            throw BackendError(std::string(op) + " on " + group_->describe() + ": oneCCL refused the operation: " +
                               e.what());
        }
    }
    return Request(std::make_shared<OneCclOperation>(shared_from_this(), op, std::move(peers), std::move(finish),
                                                     std::move(event)));
}

void Engine::settle_blocking_calls() noexcept {
    if (!calls_held_) return;
    const auto limit = std::min(group_->options().timeout, Milliseconds(10000));
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::unique_lock<std::mutex> lock(calls_held_->mutex);
    // a call stuck on a dead peer never lets go: after an abort (or the bound) the engine is left to that thread
    while (calls_held_->count > 0 && !group_->aborted() && std::chrono::steady_clock::now() < deadline)
        calls_held_->none_left.wait_for(lock, std::chrono::milliseconds(50));
}

}  // namespace ccl_core
