#include "progress_thread.hpp"

#include <ccl_core/request.hpp>

#include <ccl_core/errors.hpp>
#include <ccl_core/runtime.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>

#include <unistd.h>

namespace ccl_core {

std::string progress_mode() {
    const char* v = std::getenv("CCL_CORE_PROGRESS");
    const std::string mode = v && *v ? v : "thread";
    if (mode != "thread" && mode != "caller") {
        throw InvalidArgument("CCL_CORE_PROGRESS=" + mode + " is not a progress mode; use thread (a background "
                              "thread moves async operations, the default) or caller (they move only inside "
                              "test()/wait())");
    }
    return mode;
}

namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

// Naps between rounds of polls: short while operations complete, longer while they do not (each poll of oneCCL
// costs 50-100 µs here), and much longer once every pending op is old (a late peer: waiting must cost almost no
// CPU; a 10 s wait costs ~20 ms of polls). Shared-memory ops instead sleep on their segment's futex, which a
// peer's progress wakes at once.
constexpr auto kMinNap = std::chrono::microseconds(20);
struct NapCap {
    std::chrono::milliseconds from_age;
    std::chrono::microseconds cap;
};
constexpr NapCap kCaps[] = {{std::chrono::milliseconds(2000), std::chrono::microseconds(100000)},
                            {std::chrono::milliseconds(200), std::chrono::microseconds(20000)},
                            {std::chrono::milliseconds(20), std::chrono::microseconds(5000)},
                            {std::chrono::milliseconds(0), std::chrono::microseconds(1000)}};

std::chrono::microseconds nap_cap(std::chrono::steady_clock::duration age) {
    for (const NapCap& c : kCaps) {
        if (age >= c.from_age) return c.cap;
    }
    return kCaps[3].cap;
}

}  // namespace

ProgressThread* ProgressThread::instance() {
    // Read once (initialize_runtime() has validated it): this runs for every async op.
    static const bool wanted = progress_mode() == "thread";
    if (!wanted) return nullptr;
    // Made at the first watch (after oneCCL's initialisation), so that the static holder is destroyed, and the
    // thread joined, before oneCCL's own statics at exit. A forked child (a DataLoader worker) must not touch it at
    // all: its thread does not exist there, and destroying the copied condition variable would wait for that
    // thread for ever. The child leaves it allocated.
    struct Holder {
        ProgressThread* thread = new ProgressThread;
        ~Holder() {
            if (::getpid() == thread->owner_) delete thread;
        }
    };
    static Holder holder;
    return holder.thread;
}

ProgressThread::ProgressThread() : owner_(::getpid()), thread_([this] { run(); }) {}

ProgressThread::~ProgressThread() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

void ProgressThread::watch(const std::shared_ptr<PendingOperation>& op) {
    if (::getpid() != owner_) return;  // a forked child: its caller drives the op
    bool was_idle;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        was_idle = watched_.empty();
        watched_.push_back({op, op.get(), Clock::now()});
    }
    // Only an idle thread needs waking: a busy one takes the op in its next round, at most one nap (its cap) away.
    if (was_idle) wake_.notify_one();
}

void ProgressThread::run() {
    auto nap = kMinNap;
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
        wake_.wait(lock, [&] { return stop_ || !watched_.empty(); });
        if (stop_) return;
        const std::vector<Watched> round = watched_;
        lock.unlock();
        std::vector<const PendingOperation*> finished;
        std::vector<std::shared_ptr<PendingOperation>> pending;  // still running after this round
        for (const Watched& w : round) {
            auto op = w.op.lock();
            if (!op || op->poll_in_background()) {
                finished.push_back(w.key);
            } else {
                pending.push_back(std::move(op));
            }
        }
        lock.lock();
        watched_.erase(std::remove_if(watched_.begin(), watched_.end(), [&](const Watched& w) {
            return std::find(finished.begin(), finished.end(), w.key) != finished.end();
        }), watched_.end());
        if (watched_.empty()) {
            nap = kMinNap;
            continue;
        }
        const auto newest = std::max_element(watched_.begin(), watched_.end(),
                                             [](const Watched& a, const Watched& b) { return a.since < b.since; })->since;
        const auto age = Clock::now() - newest;
        const auto cap = nap_cap(age);
        // Sleep on the first pending op that has something to sleep on (the shared-memory path's futex) until a peer
        // publishes progress, or the cap: each step of a segment then follows at once.
        lock.unlock();
        const bool slept = std::any_of(pending.begin(), pending.end(),
                                       [&](const auto& op) { return op->sleep_in_background(cap); });
        pending.clear();
        lock.lock();
        if (slept) continue;
        nap = finished.empty() ? std::min<std::chrono::microseconds>(nap * 2, cap) : kMinNap;
        wake_.wait_for(lock, nap);  // a new op or the end of the process wakes it early
    }
}

}  // namespace detail
}  // namespace ccl_core
