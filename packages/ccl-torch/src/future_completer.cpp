#include "future_completer.hpp"

#include "work.hpp"

#include <sched.h>

#include <vector>

namespace ccl_torch {

FutureCompleter::~FutureCompleter() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void FutureCompleter::add(c10::intrusive_ptr<CCLWork> work) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        incoming_.push_back(std::move(work));
        if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    }
    cv_.notify_one();
}

void FutureCompleter::run() {
    std::vector<c10::intrusive_ptr<CCLWork>> pending;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            cv_.wait(lock, [&] { return stop_ || !incoming_.empty() || !pending.empty(); });
            if (stop_ && incoming_.empty() && pending.empty()) return;
            while (!incoming_.empty()) {
                pending.push_back(std::move(incoming_.front()));
                incoming_.pop_front();
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
}

}  // namespace ccl_torch
