#include "future_completer.hpp"

#include "work.hpp"

#include <Python.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <vector>

namespace ccl_torch {
namespace {

constexpr auto kShutdownGrace = std::chrono::seconds(2);

std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
}
std::set<FutureCompleter*>& registry() {
    static std::set<FutureCompleter*> live;
    return live;
}

// Runs fn with the GIL released when the calling thread holds it.
template <class F>
void without_gil(F&& fn) {
    PyThreadState* saved = (Py_IsInitialized() && PyGILState_Check()) ? PyEval_SaveThread() : nullptr;
    fn();
    if (saved) PyEval_RestoreThread(saved);
}

}  // namespace

FutureCompleter::FutureCompleter() {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().insert(this);
}

FutureCompleter::~FutureCompleter() {
    shutdown();
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().erase(this);
}

void FutureCompleter::shutdown() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
        without_gil([&] { thread_.join(); });
    }
}

void FutureCompleter::shutdown_all() {
    std::vector<FutureCompleter*> live;
    {
        std::lock_guard<std::mutex> lock(registry_mutex());
        live.assign(registry().begin(), registry().end());
    }
    for (auto* c : live) c->shutdown();
}

void FutureCompleter::add(c10::intrusive_ptr<CCLWork> work) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        incoming_.push_back(std::move(work));
        if (!thread_.joinable() && !stop_) thread_ = std::thread([this] { run(); });
    }
    cv_.notify_one();
}

void FutureCompleter::run() {
    std::vector<c10::intrusive_ptr<CCLWork>> pending;
    std::chrono::steady_clock::time_point give_up{};
    // After a burst of fruitless polls, nap with growing pauses: this thread must not take the cores the
    // ranks compute on (DDP overlaps its buckets with backward). New work ends a nap at once. Pauses stay short
    // (<= 0.5 ms: polling is what moves the ops) until nothing has progressed for 50 ms, as when a peer is late;
    // then they grow to 20 ms, and to 100 ms after 2 s, so that a long wait costs almost no CPU (a poll of oneCCL
    // costs 50-100 µs, and ccl-core's progress thread polls async ops as well).
    constexpr int kSpinPolls = 64;
    constexpr auto kMinNap = std::chrono::microseconds(10);
    constexpr auto kMaxNap = std::chrono::microseconds(500);
    constexpr auto kMaxLateNap = std::chrono::microseconds(20000);
    constexpr auto kLateAfter = std::chrono::milliseconds(50);
    constexpr auto kMaxHopelessNap = std::chrono::microseconds(100000);
    constexpr auto kHopelessAfter = std::chrono::milliseconds(2000);
    int idle_polls = 0;
    auto nap = kMinNap;
    auto last_progress = std::chrono::steady_clock::now();
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            if (pending.empty() || idle_polls >= kSpinPolls) {
                auto ready = [&] { return stop_ || !incoming_.empty(); };
                if (pending.empty()) {
                    cv_.wait(lock, ready);
                } else if (!cv_.wait_for(lock, nap, ready)) {
                    const auto quiet = std::chrono::steady_clock::now() - last_progress;
                    const auto cap = quiet > kHopelessAfter ? kMaxHopelessNap : quiet > kLateAfter ? kMaxLateNap : kMaxNap;
                    nap = std::min(nap * 2, cap);
                }
            }
            while (!incoming_.empty()) {
                pending.push_back(std::move(incoming_.front()));
                incoming_.pop_front();
                idle_polls = 0;
                nap = kMinNap;
                last_progress = std::chrono::steady_clock::now();
            }
            if (stop_) {
                if (give_up == std::chrono::steady_clock::time_point{}) give_up = std::chrono::steady_clock::now() + kShutdownGrace;
                if (pending.empty() || std::chrono::steady_clock::now() >= give_up) break;
            }
        }
        bool progressed = false;
        for (std::size_t i = 0; i < pending.size();) {
            if (pending[i]->poll_for_completer()) {
                pending[i] = std::move(pending.back());
                pending.pop_back();
                progressed = true;
            } else {
                ++i;
            }
        }
        if (progressed) {
            idle_polls = 0;
            nap = kMinNap;
            last_progress = std::chrono::steady_clock::now();
        } else if (++idle_polls < kSpinPolls) {
            ::sched_yield();
        }
    }
    pending.clear();  // unfinished works are dropped: their oneCCL events are kept alive by ccl-core
}

}  // namespace ccl_torch
