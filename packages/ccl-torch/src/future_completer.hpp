// A thread per process group that drives unfinished works whose Future someone holds (DDP comm hooks,
// torch.futures): with oneCCL's worker thread off, progress happens only where a thread polls.
//
// It must stop while Python is alive: finishing a future may drop Python-owned tensors (which takes the GIL),
// and Python kills any thread that reaches for the GIL during interpreter shutdown. So the backend's
// destructor stops its completer, and an atexit hook (shutdown_all) stops any that are left.
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
    FutureCompleter();
    ~FutureCompleter();
    void add(c10::intrusive_ptr<CCLWork> work);
    // Finishes what completes within a short grace period, drops the rest, joins the thread.
    // Releases the GIL while joining (the thread may need it). Idempotent.
    void shutdown();
    static void shutdown_all();

private:
    void run();

    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<c10::intrusive_ptr<CCLWork>> incoming_;
    bool stop_ = false;
    std::thread thread_;  // started on first use
};

}  // namespace ccl_torch
