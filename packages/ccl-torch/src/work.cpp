#include "work.hpp"

#include "future_completer.hpp"
#include "torch_errors.hpp"

#include <ATen/core/jit_type.h>

#include <cstdio>
#include <sched.h>
#include <thread>

namespace ccl_torch {

CCLWork::CCLWork(int rank, c10d::OpType type, const char* profiling_title, const std::vector<at::Tensor>& inputs,
                 std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout,
                 std::shared_ptr<FutureCompleter> completer)
    : c10d::Work(rank, type, profiling_title, std::optional<std::vector<at::Tensor>>(inputs)),
      outputs_(std::move(outputs)),
      timeout_(timeout),
      deadline_(std::chrono::steady_clock::now() + timeout),
      completer_(std::move(completer)),
      started_(std::chrono::steady_clock::now()) {}

void CCLWork::set_verbose(std::string description) { verbose_ = std::move(description); }

void CCLWork::defer(DeferredIssue issue, std::string what) {
    std::lock_guard<std::mutex> lock(poll_mutex_);
    deferred_ = std::move(issue);
    deferred_what_ = std::move(what);
    issue_deferred();  // often the peer has already sent
}

int CCLWork::sourceRank() const {
    TORCH_CHECK(source_rank_ >= 0, "sourceRank: only a completed recv without src knows its source");
    return source_rank_;
}

bool CCLWork::issue_deferred() {
    if (!deferred_) return true;
    auto request = deferred_(*this);
    if (!request) return false;
    requests_.push_back(std::move(*request));
    deferred_ = nullptr;
    return true;
}

// Polls the deferred issue with a growing sleep (1 to 20 ms): a recv without src costs no CPU while it waits.
void CCLWork::wait_for_deferred(std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds limit) {
    auto nap = std::chrono::milliseconds(1);
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(poll_mutex_);
            if (issue_deferred()) return;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            C10_THROW_ERROR(DistBackendError, "ccl: " + deferred_what_ + ": no rank sent to rank " +
                                                  std::to_string(rank_) + " within " + std::to_string(limit.count()) +
                                                  " ms");
        }
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::milliseconds(20));
    }
}

void CCLWork::absorb(const CCLWork& part) {
    requests_.insert(requests_.end(), part.requests_.begin(), part.requests_.end());
    finish_.insert(finish_.end(), part.finish_.begin(), part.finish_.end());
    keep_.insert(keep_.end(), part.keep_.begin(), part.keep_.end());
    keep_.insert(keep_.end(), part.outputs_.begin(), part.outputs_.end());
}

CCLWork::~CCLWork() {
    bool done;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        done = completed_;
    }
    if (done || !completer_ || requests_.empty()) return;
    auto heir = c10::make_intrusive<CCLWork>(rank_, opType_, nullptr, std::vector<at::Tensor>{}, std::vector<at::Tensor>{},
                                            timeout_, completer_);
    heir->absorb(*this);
    completer_->add(heir);
}

bool CCLWork::poll() {
    std::lock_guard<std::mutex> lock(poll_mutex_);
    {
        std::lock_guard<std::mutex> state(mutex_);
        if (completed_) return true;
    }
    std::exception_ptr error;
    try {
        if (!issue_deferred()) {
            if (std::chrono::steady_clock::now() < deadline_) return false;
            C10_THROW_ERROR(DistBackendError, "ccl: " + deferred_what_ + ": no rank sent to rank " +
                                                  std::to_string(rank_) + " within " + std::to_string(timeout_.count()) +
                                                  " ms");
        }
        for (auto& r : requests_) {
            if (!translate_errors([&] { return r.test(); })) return false;
        }
        for (auto& step : finish_) step();
    } catch (...) {
        error = std::current_exception();
    }
    complete(error);
    return true;
}

void CCLWork::complete(std::exception_ptr error) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (completed_) return;
        completed_ = true;
        exception_ = error;
    }
    if (recordFunctionEndCallback_) {
        recordFunctionEndCallback_();
        recordFunctionEndCallback_ = nullptr;
    }
    if (!verbose_.empty()) {
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started_).count();
        std::fprintf(stderr, "[oneccl_bindings_for_pytorch] %s %s in %.1f us\n", verbose_.c_str(),
                     error ? "failed" : "done", us);
    }
    if (future_) {
        if (error) future_->setError(error);
        else future_->markCompleted(c10::IValue(outputs_));
    }
    cv_.notify_all();
}

bool CCLWork::isCompleted() { return poll(); }

bool CCLWork::isSuccess() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ && !exception_;
}

std::exception_ptr CCLWork::exception() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return exception_;
}

bool CCLWork::wait(std::chrono::milliseconds timeout) {
    const auto limit = timeout == ::kNoTimeout ? timeout_ : timeout;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    try {
        wait_for_deferred(deadline, limit);
    } catch (...) {
        complete(std::current_exception());
        std::rethrow_exception(exception());
    }
    // Each request waits with the time left; a request's own timeout error (naming op and ranks) wins.
    for (std::size_t i = 0; i < requests_.size(); ++i) {
        // the first request gets the whole limit, so that its timeout message states the user's value
        const auto left = i == 0 ? limit
                                 : std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        try {
            translate_errors([&] { requests_[i].wait(std::max(left, std::chrono::milliseconds(0))); });
        } catch (...) {
            complete(std::current_exception());
            break;
        }
    }
    poll();
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
    return true;
}

bool CCLWork::poll_for_completer() {
    if (poll()) return true;
    if (std::chrono::steady_clock::now() < deadline_) return false;
    // The first unfinished request raises the timeout: it aborts the communicator and names the op, the ranks
    // and the work's timeout (not this poll's slice).
    try {
        for (auto& r : requests_) translate_errors([&] { r.expire(timeout_); });
        poll();
    } catch (...) {
        complete(std::current_exception());
    }
    return true;
}

c10::intrusive_ptr<c10::ivalue::Future> CCLWork::getFuture() {
    bool register_with_completer = false;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!future_) {
            future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
            if (completed_) {
                if (exception_) future_->setError(exception_);
                else future_->markCompleted(c10::IValue(outputs_));
            } else {
                register_with_completer = true;
            }
        }
    }
    // Nothing else drives oneCCL while the caller waits on the future: the completer thread does.
    if (register_with_completer) completer_->add(c10::intrusive_ptr<CCLWork>::reclaim_copy(this));
    return future_;
}

}  // namespace ccl_torch
