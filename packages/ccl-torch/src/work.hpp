// The c10d::Work of every ccl operation, and what it waits for.
//
// A WorkOperation is one operation of ccl-core's (a PendingOperation): the op's requests, a recv that can only be
// issued later, and the steps that finish the result (copy back staged outputs, local reductions). Being one, it is
// moved by ccl-core's progress thread like any request: while an async caller computes, to completion for a future
// (DDP's comm hooks), and to the end when the work is dropped before it finished, keeping its tensors alive.
#pragma once

#include "tensors.hpp"

#include <ccl_core/progress.hpp>
#include <ccl_core/request.hpp>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ccl_torch {

class WorkOperation final : public ccl_core::PendingOperation {
public:
    WorkOperation(std::string op, int rank, std::chrono::milliseconds timeout);
    // Let go on ccl-core's progress thread (the caller dropped its work as the thread polled it), it hands what it
    // holds to a user's thread: tensors need Python's lock to go, and at the interpreter's exit a thread that asks
    // for it is ended on the spot, which aborts the process.
    ~WorkOperation() override;

    // Adds a request (issued in order; all complete before the finish steps run); it times out with the work.
    void add(ccl_core::Request request);
    // A request that can only be issued later (recv from any source: once some peer has sent). `issue` is retried
    // by every poll and wait until it returns a request and the source rank it chose.
    using DeferredIssue = std::function<std::optional<std::pair<ccl_core::Request, int>>()>;
    void defer(DeferredIssue issue, std::string what);
    FinishSteps& finish_steps() { return finish_; }
    // Tensors the operation reads or writes that the caller may drop before it completes (temporaries).
    void keep_alive(const at::Tensor& t) { keep_.push_back(t); }
    // Takes over another operation's requests, finish steps, tensors and success callbacks (coalescing: one Work for
    // many ops).
    void absorb(WorkOperation& part);
    // Runs once the operation completed successfully (after its finish steps), on the thread that saw it and outside
    // the operation's lock: torch's completion hooks.
    void on_success(std::function<void()> callback);
    std::chrono::steady_clock::time_point created() const { return created_; }
    // Issue to completion, once completed successfully.
    std::chrono::steady_clock::duration took() const;
    void set_source_rank(int rank) { source_rank_ = rank; }
    int source_rank() const { return source_rank_; }

    bool test() override;
    void wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) override;
    bool completed() const override;
    const std::string& op_name() const override { return op_; }
    void set_timeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }
    bool sleep_in_background(std::chrono::microseconds limit) override;
    bool driven_by_a_caller() const override;

private:
    // true once no deferred request is left (caller holds mutex_)
    bool issue_deferred();
    // the first request not yet complete, or nullptr
    std::shared_ptr<ccl_core::PendingOperation> first_pending() const;

    const std::string op_;
    const int rank_;
    std::chrono::milliseconds timeout_;
    const std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
    mutable std::mutex mutex_;
    std::vector<ccl_core::Request> requests_;
    DeferredIssue deferred_;
    std::string deferred_what_;  // for the message when no peer sends
    FinishSteps finish_;
    std::vector<at::Tensor> keep_;
    std::vector<std::function<void()>> on_success_;
    bool done_ = false;
    std::chrono::steady_clock::time_point finished_at_{};
    std::exception_ptr failure_;
    std::atomic<int> source_rank_{-1};
};

class CCLWork : public c10d::Work {
public:
    CCLWork(int rank, c10d::OpType type, const char* profiling_title, const std::vector<at::Tensor>& inputs,
            std::vector<at::Tensor> outputs, std::shared_ptr<WorkOperation> op);
    // A work dropped before it completed hands its operation to ccl-core's progress thread, which finishes it and
    // keeps its tensors alive meanwhile, so that oneCCL never writes into freed tensors.
    ~CCLWork() override;

    WorkOperation& operation() { return *op_; }
    // The operation moves in the background while the caller computes (async ops).
    void move_in_background();
    // Its operation was absorbed by another work's (coalescing), which completes it.
    void merged() { handed_over_ = true; }
    // Log completion with this description (ONECCL_BINDINGS_FOR_PYTORCH_ENV_VERBOSE).
    void set_verbose(std::string description) { verbose_ = std::move(description); }

    int sourceRank() const override;
    bool isCompleted() override;  // never blocks; drives progress
    bool isSuccess() const override;
    std::exception_ptr exception() const override;
    bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
    std::vector<at::Tensor> result() override { return outputs_; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
    uint64_t getSequencenumber() const override { return seq_; }
    // Issue to completion in ms, for a group that times its ops (enableCollectivesTiming); raises otherwise.
    float getDuration() const override;
#if CCL_TORCH_MINOR >= 15
    // Never reused (HookTables::next_completion_key): the op may complete after the work is gone.
    uint64_t getCompletionKey() const override { return completion_key_; }
#endif
    uint64_t completion_key() const { return completion_key_; }
    void set_sequence_number(uint64_t seq) { seq_ = seq; }
    // The op is timed: getDuration() reports issue to completion.
    void time_it() { timed_ = true; }

private:
    void complete(std::exception_ptr error);

    std::shared_ptr<WorkOperation> op_;
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
    bool handed_over_ = false;  // someone else completes op_: the progress thread (a future), or a coalesced work
    std::string verbose_;       // non-empty when ONECCL_BINDINGS_FOR_PYTORCH_ENV_VERBOSE is set
    const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
    uint64_t seq_ = 0;
    const uint64_t completion_key_;
    bool timed_ = false;
};

}  // namespace ccl_torch
