#include "work.hpp"

#include "hooks.hpp"
#include "interrupts.hpp"
#include "torch_errors.hpp"

#include <ccl_core/backoff.hpp>

#include <ATen/core/jit_type.h>

#include <cstdio>

namespace ccl_torch {

// ---- the operation ------------------------------------------------------------------------------------------

WorkOperation::WorkOperation(std::string op, int rank, std::chrono::milliseconds timeout)
    : op_(std::move(op)), rank_(rank), timeout_(timeout) {}

WorkOperation::~WorkOperation() {
    if (!ccl_core::on_progress_thread()) return;
    struct Held {
        std::vector<ccl_core::Request> requests;
        DeferredIssue deferred;
        FinishSteps finish;
        std::vector<at::Tensor> keep;
    };
    ccl_core::release_on_a_user_thread(
        std::make_shared<Held>(Held{std::move(requests_), std::move(deferred_), std::move(finish_), std::move(keep_)}));
}

void WorkOperation::add(ccl_core::Request request) {
    request.set_timeout(timeout_);
    std::lock_guard<std::mutex> lock(mutex_);
    requests_.push_back(std::move(request));
}

void WorkOperation::defer(DeferredIssue issue, std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    deferred_ = std::move(issue);
    deferred_what_ = std::move(what);
    issue_deferred();  // often the peer has already sent
}

bool WorkOperation::issue_deferred() {
    if (!deferred_) return true;
    auto issued = deferred_();
    if (!issued) return false;
    issued->first.set_timeout(timeout_);
    requests_.push_back(std::move(issued->first));
    source_rank_ = issued->second;
    deferred_ = nullptr;
    return true;
}

void WorkOperation::absorb(WorkOperation& part) {
    std::scoped_lock lock(mutex_, part.mutex_);
    requests_.insert(requests_.end(), part.requests_.begin(), part.requests_.end());
    finish_.insert(finish_.end(), part.finish_.begin(), part.finish_.end());
    keep_.insert(keep_.end(), part.keep_.begin(), part.keep_.end());
    on_success_.insert(on_success_.end(), std::make_move_iterator(part.on_success_.begin()),
                       std::make_move_iterator(part.on_success_.end()));
    part.on_success_.clear();
}

void WorkOperation::on_success(std::function<void()> callback) {
    std::lock_guard<std::mutex> lock(mutex_);
    on_success_.push_back(std::move(callback));
}

bool WorkOperation::test() {
    std::vector<std::function<void()>> succeeded;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (done_) return true;
        if (failure_) std::rethrow_exception(failure_);
        try {
            if (!issue_deferred()) {
                if (std::chrono::steady_clock::now() - created_ < timeout_) return false;
                C10_THROW_ERROR(DistBackendError, "ccl: " + deferred_what_ + ": no rank sent to rank " +
                                                      std::to_string(rank_) + " within " +
                                                      std::to_string(timeout_.count()) + " ms");
            }
            for (auto& r : requests_) {
                if (!translate_errors([&] { return r.test(); })) return false;
            }
            for (auto& step : finish_) step();
        } catch (...) {
            failure_ = std::current_exception();
            throw;
        }
        done_ = true;  // kept tensors go with the operation: released on the thread that drops it last
        finished_at_ = std::chrono::steady_clock::now();
        succeeded.swap(on_success_);
    }
    for (auto& callback : succeeded) callback();
    return true;
}

void WorkOperation::wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = timeout ? start + *timeout : created_ + timeout_;
    // A recv without src: until some peer has sent, it naps (Backoff), so it costs no CPU while it waits.
    auto next_callback = start + std::chrono::milliseconds(50);
    for (ccl_core::Backoff backoff({}, start);;) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (failure_) std::rethrow_exception(failure_);
            if (issue_deferred()) break;
        }
        const auto now = std::chrono::steady_clock::now();
        if (every_50ms && now >= next_callback) {
            next_callback = now + std::chrono::milliseconds(50);
            every_50ms();  // nothing issued yet: there is no op to abort
        }
        if (now >= deadline) {
            std::lock_guard<std::mutex> lock(mutex_);
            try {
                C10_THROW_ERROR(DistBackendError, "ccl: " + deferred_what_ + ": no rank sent to rank " +
                                                      std::to_string(rank_) + " within " +
                                                      std::to_string(timeout.value_or(timeout_).count()) + " ms");
            } catch (...) {
                failure_ = std::current_exception();
                throw;
            }
        }
        backoff.pause(now);
    }
    std::vector<ccl_core::Request> requests;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        requests = requests_;
    }
    // Each request waits until its own deadline, or the caller's: the first gets the caller's whole limit, so that a
    // timeout's message states it.
    for (std::size_t i = 0; i < requests.size(); ++i) {
        std::optional<std::chrono::milliseconds> left;
        if (timeout) {
            left = i == 0 ? *timeout
                          : std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                        deadline - std::chrono::steady_clock::now()));
        }
        try {
            translate_errors([&] { requests[i].wait(left, every_50ms); });
        } catch (...) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!failure_) failure_ = std::current_exception();
            throw;
        }
    }
    (void)test();  // the finish steps
}

std::chrono::steady_clock::duration WorkOperation::took() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_ ? finished_at_ - created_ : std::chrono::steady_clock::duration::zero();
}

bool WorkOperation::completed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
}

std::shared_ptr<ccl_core::PendingOperation> WorkOperation::first_pending() const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& r : requests_) {
        if (!r.completed()) return r.operation();
    }
    return nullptr;
}

bool WorkOperation::sleep_in_background(std::chrono::microseconds limit) {
    auto op = first_pending();
    return op && op->sleep_in_background(limit);
}

bool WorkOperation::driven_by_a_caller() const {
    auto op = first_pending();
    return op && op->driven_by_a_caller();
}

// ---- the work -----------------------------------------------------------------------------------------------

CCLWork::CCLWork(int rank, c10d::OpType type, const char* profiling_title, const std::vector<at::Tensor>& inputs,
                 std::vector<at::Tensor> outputs, std::shared_ptr<WorkOperation> op)
    : c10d::Work(rank, type, profiling_title, std::optional<std::vector<at::Tensor>>(inputs)),
      op_(std::move(op)),
      outputs_(std::move(outputs)),
      completion_key_(HookTables::next_completion_key()) {}

float CCLWork::getDuration() const {
    TORCH_CHECK(timed_, "ccl: getDuration needs the group to time its ops: call enableCollectivesTiming() on the "
                "backend (TORCH_NCCL_ENABLE_TIMING=1 does so for torch's own ops)");
    TORCH_CHECK(op_->completed(), "ccl: getDuration of an op that has not completed successfully");
    return std::chrono::duration<float, std::milli>(op_->took()).count();
}

CCLWork::~CCLWork() {
    bool done;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        done = completed_ || handed_over_;
    }
    if (!done && !op_->completed()) ccl_core::complete_in_background(op_, {});
}

void CCLWork::move_in_background() { ccl_core::progress_in_background(op_); }

int CCLWork::sourceRank() const {
    const int source = op_->source_rank();
    TORCH_CHECK(source >= 0, "sourceRank: only a completed recv without src knows its source");
    return source;
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

bool CCLWork::isCompleted() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (completed_) return true;
    }
    try {
        if (!op_->test()) return false;
        complete(nullptr);
    } catch (...) {
        complete(std::current_exception());
    }
    return true;
}

bool CCLWork::isSuccess() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ && !exception_;
}

std::exception_ptr CCLWork::exception() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return exception_;
}

bool CCLWork::wait(std::chrono::milliseconds timeout) {
    bool interrupted = false;
    try {
        op_->wait(timeout == ::kNoTimeout ? std::nullopt : std::optional<std::chrono::milliseconds>(timeout),
                  [&] { check_for_interrupt(interrupted); });
        if (op_->test()) complete(nullptr);  // a device op may be only issued (EngineSettings::wait_for_completion)
    } catch (...) {
        if (interrupted) throw;  // Ctrl-C: ccl-core aborted the group, whose error the op reports from now on
        complete(std::current_exception());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
    return true;
}

c10::intrusive_ptr<c10::ivalue::Future> CCLWork::getFuture() {
    bool hand_over = false;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!future_) {
            future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
            if (completed_) {
                if (exception_) future_->setError(exception_);
                else future_->markCompleted(c10::IValue(outputs_));
            } else {
                hand_over = handed_over_ = true;
            }
        }
    }
    // Nothing else drives the op while the caller waits on the future: ccl-core's progress thread does.
    if (hand_over) {
        ccl_core::complete_in_background(op_, {[self = c10::intrusive_ptr<CCLWork>::reclaim_copy(this)](
                                                   std::exception_ptr error) { self->complete(error); },
                                               {}});
    }
    return future_;
}

}  // namespace ccl_torch
