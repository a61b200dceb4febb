// A thread per process group that drives unfinished works whose Future someone holds (DDP comm hooks,
// torch.futures): with oneCCL's worker thread off, progress happens only where a thread polls.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace ccl_torch {

class CCLWork;

class FutureCompleter {
public:
    FutureCompleter() = default;
    ~FutureCompleter();
    void add(c10::intrusive_ptr<CCLWork> work);

private:
    void run();

    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<c10::intrusive_ptr<CCLWork>> incoming_;
    bool stop_ = false;
    std::thread thread_;  // started on first use
};

}  // namespace ccl_torch
