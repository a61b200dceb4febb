#include "progress_thread.hpp"

#include "../settings.hpp"

#include <ccl_core/backoff.hpp>
#include <ccl_core/errors.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include <unistd.h>

namespace ccl_core {

std::string progress_mode() {
    std::string mode = detail::setting_text("CCL_CORE_PROGRESS");
    if (mode.empty()) mode = "thread";
    if (mode != "thread" && mode != "caller") {
        throw InvalidArgument("CCL_CORE_PROGRESS=" + mode + " is not a progress mode; use thread (a background "
                              "thread moves async operations, the default) or caller (they move only inside "
                              "test()/wait())");
    }
    return mode;
}

void progress_in_background(const std::shared_ptr<PendingOperation>& op) {
    detail::release_completed_operations();
    // Read once (the engine validated it at creation): this runs for every async op.
    static const bool wanted = progress_mode() == "thread";
    if (!wanted || !op) return;
    // A small op whose peers are already there often completes in this one poll: then no thread need hear of it.
    try {
        if (op->test()) return;
    } catch (...) {
        return;  // the op keeps its failure for its caller
    }
    detail::ProgressThread::instance().watch(op);
}

void complete_in_background(std::shared_ptr<PendingOperation> op, Completion completion) {
    if (!op) throw InvalidArgument("complete_in_background() of an empty operation");
    detail::release_completed_operations();
    detail::ProgressThread::instance().own(std::move(op), std::move(completion));
}

namespace detail {
namespace {

std::atomic<ProgressThread*> started{nullptr};  // for stop_completions(), which must not start the thread

using Clock = std::chrono::steady_clock;

// Never destroyed: what an operation that failed, or outlived the completions, may still touch.
template <class T>
void leave_to_the_process_end(T&& thing) {
    new std::decay_t<T>(std::forward<T>(thing));
}

}  // namespace

ProgressThread& ProgressThread::instance() {
    // Made at first use (after oneCCL's initialisation), so that the static holder is destroyed, and the thread
    // joined, before oneCCL's own statics at exit. A forked child (a DataLoader worker) must not touch it at all:
    // its thread does not exist there, and destroying the copied condition variable would wait for that thread for
    // ever. The child leaves it allocated.
    struct Holder {
        ProgressThread* thread = new ProgressThread;
        ~Holder() {
            if (::getpid() == thread->owner_) delete thread;
        }
    };
    static Holder holder;
    started.store(holder.thread);
    return *holder.thread;
}

ProgressThread::ProgressThread() : owner_(::getpid()), thread_([this] { run(); }) {}

ProgressThread::~ProgressThread() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    // Operations still owned at exit are unfinished: their buffers stay, as after a failure; what completed ones
    // left behind may belong to Python, which is gone by now.
    leave_to_the_process_end(std::move(watched_));
    leave_to_the_process_end(std::move(graveyard_));
}

void ProgressThread::watch(const std::shared_ptr<PendingOperation>& op) {
    if (::getpid() != owner_) return;  // a forked child: its caller drives the op
    bool idle;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        watched_.push_back({op, nullptr, {}, op.get(), Clock::now()});
        idle = waiting_;
    }
    // A thread in a round, or waiting out another op's grace, sees it well within this one's; only a sleeping one
    // needs the wake-up (a system call, and a context switch on a host whose cores the ranks use).
    if (idle) wake_.notify_one();
}

void ProgressThread::own(std::shared_ptr<PendingOperation> op, Completion completion) {
    if (::getpid() != owner_) {  // a forked child has no thread to complete it: keep what it uses
        leave_to_the_process_end(std::move(op));
        leave_to_the_process_end(std::move(completion));
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        const PendingOperation* key = op.get();
        watched_.push_back({{}, std::move(op), std::move(completion), key, Clock::now()});
    }
    wake_.notify_one();
}

void ProgressThread::stop_completions() {
    if (::getpid() != owner_) return;
    std::lock_guard<std::mutex> lock(completion_mutex_);  // waits for the completion that runs
    completions_stopped_ = true;
}

void ProgressThread::finish(Watched& w) {
    std::exception_ptr failure;
    try {
        w.owned->test();
    } catch (...) {
        failure = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(completion_mutex_);
    if (completions_stopped_ || failure) {
        // after a failure the operation may still write into its buffers; after the stop they may be Python's
        if (!completions_stopped_ && w.completion.done) {
            try {
                w.completion.done(failure);
            } catch (...) {
            }
        }
        leave_to_the_process_end(std::move(w.completion.hold));
        leave_to_the_process_end(std::move(w.owned));
        bury(std::make_shared<Watched>(std::move(w)));  // `done` may hold Python's objects (a torch work)
        return;
    }
    if (w.completion.done) {
        try {
            w.completion.done(nullptr);
        } catch (...) {
        }
    }
    bury(std::make_shared<Watched>(std::move(w)));
}

void ProgressThread::bury(std::shared_ptr<void> leftover) {
    std::lock_guard<std::mutex> graves(graveyard_mutex_);
    graveyard_.push_back(std::move(leftover));
    graves_.store(true, std::memory_order_release);
}

void ProgressThread::release_completed() {
    if (!graves_.load(std::memory_order_acquire) || ::getpid() != owner_ ||
        std::this_thread::get_id() == thread_.get_id()) {
        return;
    }
    std::vector<std::shared_ptr<void>> dead;
    {
        std::lock_guard<std::mutex> lock(completion_mutex_);  // after the stop they may be Python's: left alone
        if (completions_stopped_) return;
        std::lock_guard<std::mutex> graves(graveyard_mutex_);
        dead.swap(graveyard_);
        graves_.store(false, std::memory_order_release);
    }
    dead.clear();  // outside the locks: destroying an operation may destroy its communicator
}

void release_completed_operations() {
    if (ProgressThread* thread = started.load()) thread->release_completed();
}

void ProgressThread::let_go(std::chrono::milliseconds bound) {
    if (::getpid() != owner_ || std::this_thread::get_id() == thread_.get_id()) return;
    {
        std::unique_lock<std::mutex> lock(mutex_);
        let_go_.wait_for(lock, bound, [&] { return !holding_; });
    }
    release_completed();
}

void ProgressThread::stop_holding() {
    holding_ = false;
    let_go_.notify_all();
}

void let_go_of_completed_operations(std::chrono::milliseconds bound) {
    if (ProgressThread* thread = started.load()) thread->let_go(bound);
}

bool ProgressThread::poll_round(std::unique_lock<std::mutex>& lock) {
    // Owned entries move out for the round (their completion may run without the lock); watched ones are copied.
    std::vector<Watched> round;
    round.swap(watched_);
    holding_ = true;
    lock.unlock();
    std::vector<Watched> pending;
    bool progressed = false;
    const auto now = Clock::now();
    for (Watched& w : round) {
        std::shared_ptr<PendingOperation> op = w.owned ? w.owned : w.watched.lock();
        bool through = !op;
        if (op && !w.owned && now - w.since < kCallerGrace) {  // its caller may be waiting on it already
            pending.push_back(std::move(w));
            continue;
        }
        if (op && !op->driven_by_a_caller()) {
            try {
                through = op->test();
            } catch (...) {
                through = true;  // the failure is kept in the op for its caller (or its completion)
            }
        }
        if (!through) {
            pending.push_back(std::move(w));
            continue;
        }
        progressed = true;
        if (w.owned) finish(w);
    }
    round.clear();
    lock.lock();
    stop_holding();
    // ops that arrived during the round are already in watched_; the pending ones go back before them
    watched_.insert(watched_.begin(), std::make_move_iterator(pending.begin()), std::make_move_iterator(pending.end()));
    // an async op whose future was asked for meanwhile is now owned: poll it once per round, not twice
    std::vector<const PendingOperation*> owned;
    for (const Watched& w : watched_) {
        if (w.owned) owned.push_back(w.key);
    }
    watched_.erase(std::remove_if(watched_.begin(), watched_.end(), [&](const Watched& w) {
        return !w.owned && std::find(owned.begin(), owned.end(), w.key) != owned.end();
    }), watched_.end());
    return progressed;
}

void ProgressThread::rest(std::unique_lock<std::mutex>& lock, Backoff& backoff, std::size_t seen) {
    // Sleep on the first pending op that has something to sleep on (the shared-memory path's futex) until a peer
    // publishes progress, else nap on the condition variable (a new op wakes it). The shortest nap any pending op
    // asks for (a transfer between hosts) bounds either.
    const auto now = Clock::now();
    std::vector<std::shared_ptr<PendingOperation>> sleepers;
    Backoff::Sleep how;
    for (const Watched& w : watched_) {
        if (auto op = w.owned ? w.owned : w.watched.lock()) {
            const auto asked = op->nap_limit(now - w.since);
            if (asked.count() > 0 && (how.bound.count() == 0 || asked < how.bound)) how.bound = asked;
            sleepers.push_back(std::move(op));
        }
    }
    holding_ = !sleepers.empty();
    how.on_peers = [&](std::chrono::microseconds limit) {
        return std::any_of(sleepers.begin(), sleepers.end(), [&](const auto& op) { return op->sleep_in_background(limit); });
    };
    how.plain = [&](std::chrono::microseconds nap) {
        sleepers.clear();  // nothing to sleep on: a nap holds no op (the last reference to one may go here)
        lock.lock();
        stop_holding();
        waiting_ = true;
        wake_.wait_for(lock, nap, [&] { return stop_ || watched_.size() > seen; });
        waiting_ = false;
        lock.unlock();
    };
    lock.unlock();
    // While callers wait on every pending op they drive them: polling beside them would only take a core from the
    // ranks. Look again after a millisecond (or when a new op comes), in case a caller stops waiting.
    const bool all_driven = std::all_of(sleepers.begin(), sleepers.end(), [](const auto& op) { return op->driven_by_a_caller(); });
    if (all_driven && !sleepers.empty()) {
        how.plain(std::chrono::microseconds(1000));
    } else {
        backoff.pause(now, how);
    }
    sleepers.clear();  // without the lock: the last reference to an op may go here
    lock.lock();
    stop_holding();
}

std::optional<Clock::time_point> ProgressThread::all_in_grace(Clock::time_point now) const {
    std::optional<Clock::time_point> first;
    for (const Watched& w : watched_) {
        if (w.owned || now - w.since >= kCallerGrace) return std::nullopt;
        if (!first || w.since + kCallerGrace < *first) first = w.since + kCallerGrace;
    }
    return first;
}

void ProgressThread::run() {
    Backoff backoff;
    std::unique_lock<std::mutex> lock(mutex_);
    for (std::size_t seen = 0;;) {  // entries at the end of the last round: more means a new op arrived
        waiting_ = true;
        wake_.wait(lock, [&] { return stop_ || !watched_.empty(); });
        waiting_ = false;
        if (stop_) return;
        if (watched_.size() > seen) backoff.restart(Clock::now());
        const bool progressed = poll_round(lock);
        seen = watched_.size();
        if (watched_.empty()) continue;
        if (auto until = all_in_grace(Clock::now())) {  // their callers may be waiting on them: come back after
            wake_.wait_until(lock, *until, [&] {
                return stop_ || std::any_of(watched_.begin(), watched_.end(), [](const Watched& w) { return w.owned != nullptr; });
            });
            continue;
        }
        if (progressed) backoff.restart(Clock::now());
        rest(lock, backoff, seen);
    }
}

}  // namespace detail

void stop_completions() {
    if (detail::ProgressThread* thread = detail::started.load()) thread->stop_completions();
}

bool on_progress_thread() {
    detail::ProgressThread* thread = detail::started.load();
    return thread && thread->is_this_thread();
}

void release_on_a_user_thread(std::shared_ptr<void> leftover) {
    detail::ProgressThread* thread = detail::started.load();
    if (thread && thread->is_this_thread()) {
        thread->bury(std::move(leftover));
    }  // else: this is a user's thread (or no progress thread exists): it is released here
}

}  // namespace ccl_core
