#include "future_completer.hpp"

#include "work.hpp"

#include <Python.h>
#include <sched.h>

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
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            cv_.wait(lock, [&] { return stop_ || !incoming_.empty() || !pending.empty(); });
            while (!incoming_.empty()) {
                pending.push_back(std::move(incoming_.front()));
                incoming_.pop_front();
            }
            if (stop_) {
                if (give_up == std::chrono::steady_clock::time_point{}) give_up = std::chrono::steady_clock::now() + kShutdownGrace;
                if (pending.empty() || std::chrono::steady_clock::now() >= give_up) break;
            }
        }
        for (std::size_t i = 0; i < pending.size();) {
            if (pending[i]->poll_for_completer()) {
                pending[i] = std::move(pending.back());
                pending.pop_back();
            } else {
                ++i;
            }
        }
        if (!pending.empty()) ::sched_yield();
    }
    pending.clear();  // unfinished works are dropped: their oneCCL events are kept alive by ccl-core
}

}  // namespace ccl_torch
