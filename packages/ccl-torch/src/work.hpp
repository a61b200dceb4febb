// The c10d::Work of every ccl operation: one or more ccl-core requests, the steps that finish the result
// (copy back staged outputs, local reductions), a Future for DDP-style hooks, and the profiler range.
#pragma once

#include "tensors.hpp"

#include <ccl_core/collectives.hpp>
#include <ccl_core/request.hpp>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <vector>

namespace ccl_torch {

class FutureCompleter;

class CCLWork : public c10d::Work {
public:
    CCLWork(int rank, c10d::OpType type, const char* profiling_title, const std::vector<at::Tensor>& inputs,
            std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout,
            std::shared_ptr<FutureCompleter> completer);

    // Adds a request this work waits for (issued in order; all complete before the finish steps run).
    void add(ccl_core::Request request) { requests_.push_back(std::move(request)); }
    // Hands every operation issued so far to ccl-core's progress thread (the caller will not wait right away).
    void move_in_background() {
        for (auto& r : requests_) r.move_in_background();
    }
    // A request that can only be issued later (recv from any source: once some peer has sent). `issue` is
    // retried by every poll and wait until it returns a request; it sets the source rank when it does.
    using DeferredIssue = std::function<std::optional<ccl_core::Request>(CCLWork&)>;
    void defer(DeferredIssue issue, std::string what);
    void set_source_rank(int rank) { source_rank_ = rank; }
    int sourceRank() const override;
    // The collectives this work's op runs on (CPU or a device plugin's), chosen when the work is made.
    void set_engine(ccl_core::Collectives& engine) { engine_ = &engine; }
    ccl_core::Collectives& engine() const { return *engine_; }
    FinishSteps& finish_steps() { return finish_; }
    // Tensors oneCCL reads or writes that the caller may drop before the op completes (temporaries).
    void keep_alive(const at::Tensor& t) { keep_.push_back(t); }
    // Takes over another work's requests, finish steps and tensors (coalescing: one Work for many ops).
    void absorb(const CCLWork& part);
    // A work dropped before completion hands everything to an heir that the completer finishes,
    // so that oneCCL never writes into freed tensors.
    ~CCLWork() override;
    // Log completion with this description (ONECCL_BINDINGS_FOR_PYTORCH_ENV_VERBOSE).
    void set_verbose(std::string description);

    bool isCompleted() override;  // never blocks; drives progress
    bool isSuccess() const override;
    std::exception_ptr exception() const override;
    bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
    std::vector<at::Tensor> result() override { return outputs_; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

    // For the completer: progress once, failing the work when its deadline passed. True when done.
    bool poll_for_completer();

private:
    bool poll();                          // test every request; run finish steps when all are done
    bool issue_deferred();                // true once no deferred request is left (caller holds poll_mutex_)
    void wait_for_deferred(std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds limit);
    void complete(std::exception_ptr error);

    ccl_core::Collectives* engine_ = nullptr;
    std::vector<ccl_core::Request> requests_;
    DeferredIssue deferred_;
    std::string deferred_what_;  // for the timeout message
    int source_rank_ = -1;
    FinishSteps finish_;
    std::vector<at::Tensor> outputs_;
    std::vector<at::Tensor> keep_;
    std::chrono::milliseconds timeout_;
    std::chrono::steady_clock::time_point deadline_;
    std::shared_ptr<FutureCompleter> completer_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
    std::string verbose_;  // non-empty when ONECCL_BINDINGS_FOR_PYTORCH_ENV_VERBOSE is set
    std::chrono::steady_clock::time_point started_;
    mutable std::mutex poll_mutex_;
};

}  // namespace ccl_torch
