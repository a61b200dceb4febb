// The `ccl` c10d backend for CPU tensors (and other devices through plugins, see device_plugin.hpp).
//
// Every op runs one skeleton, launch(): its check runs every argument check on every tensor and computes what the
// issue needs (a Checked: the tensors the work records, and the op's plan: reduction, counts, staging); then the
// collectives of the tensors' device are chosen, the work is made (which advances the sequence number) and the
// issue starts the op on ccl-core with that plan. A bad tensor thus raises on every rank that sees it and leaves no
// rank out of step. The ops live in one file per family (ops_*.cpp).
#pragma once

#include "any_source.hpp"
#include "work.hpp"

#include <ccl_core/collectives.hpp>
#include <ccl_core/communicator.hpp>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>

namespace ccl_torch {

// What an op's check hands to its issue.
template <class Plan>
struct Checked {
    std::vector<at::Tensor> inputs, outputs;  // what the work records (profiler, result())
    Plan plan;                                // what the issue needs, computed once
};
struct NoPlan {};

// What an op's issue works with: the operation its requests go into, and the collectives of its device.
struct Issue {
    WorkOperation& op;
    ccl_core::Collectives& on;
};

class ProcessGroupCCL : public c10d::Backend {
public:
    ProcessGroupCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout, const std::string& name = "default");
    ~ProcessGroupCCL() override;

    const std::string getBackendName() const override { return "ccl"; }
    void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }
    // Sequence numbers let torch's debug wrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL) match ops across ranks;
    // like gloo, every group starts at 0 and counts the ops issued on it.
    void setSequenceNumberForGroup() override { seq_ = 0; }
    uint64_t getSequenceNumberForGroup() override { return seq_; }

    // ops_reductions.cpp
    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceCoalescedOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                  const c10d::ReduceScatterOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::ReduceScatterOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                   std::vector<at::Tensor>& inputs,
                                                                   const c10d::ReduceScatterOptions& opts) override;
    // ops_gathers.cpp
    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllgatherOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                   std::vector<at::Tensor>& inputs,
                                                                   const c10d::AllgatherOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::GatherOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                           const c10d::ScatterOptions& opts) override;
    // ops_all_to_all.cpp
    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& output_split_sizes,
                                                 std::vector<int64_t>& input_split_sizes,
                                                 const c10d::AllToAllOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                            const c10d::AllToAllOptions& opts) override;
    // ops_point_to_point.cpp
    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
    // ops_coalescing.cpp: works issued between start and end are returned as one Work by endCoalescing.
    void startCoalescing() override;
    c10::intrusive_ptr<c10d::Work> endCoalescing() override;
    // process_group_ccl.cpp
    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

    ccl_core::Communicator& communicator() { return *comm_; }

private:
    // Which op, and how it is waited for: `async` (the options' asyncOp; false for a blocking call, which waits
    // at once) lets ccl-core's progress thread move it while the caller computes.
    struct OpSpec {
        c10d::OpType type;
        const char* name;
        std::chrono::milliseconds timeout;  // c10d::kUnsetTimeout: the group's
        bool async;
    };
    // The skeleton of every op (see the top of this file). `check()` returns a Checked<Plan>; `issue(Issue&, Plan&)`
    // starts it.
    template <class Check, class IssueSteps>
    c10::intrusive_ptr<c10d::Work> launch(const OpSpec& spec, Check&& check, IssueSteps&& issue) {
        auto checked = check();
        ccl_core::Collectives& on = collectives_for(spec.name, checked.inputs, checked.outputs);
        auto work = make_work(spec, checked.inputs, std::move(checked.outputs));
        Issue steps{work->operation(), on};
        issue(steps, checked.plan);
        if (spec.async) work->move_in_background();
        return work;
    }
    c10::intrusive_ptr<CCLWork> make_work(const OpSpec& spec, const std::vector<at::Tensor>& inputs,
                                          std::vector<at::Tensor> outputs);
    // The collectives for the op's device: ccl-core's communicator for CPU tensors, a plugin's for others (made at
    // the group's first op on that device). Checks that every tensor is on one device.
    ccl_core::Collectives& collectives_for(const char* op, const std::vector<at::Tensor>& inputs,
                                           const std::vector<at::Tensor>& outputs);
    c10::intrusive_ptr<c10d::Work> allreduce_all(const OpSpec& spec, std::vector<at::Tensor>& tensors,
                                                 const c10d::ReduceOp& rop);

    std::shared_ptr<ccl_core::Store> store_;
    std::shared_ptr<ccl_core::Communicator> comm_;
    std::mutex device_mutex_;
    std::map<c10::DeviceType, std::shared_ptr<ccl_core::Collectives>> device_collectives_;  // from device plugins
    std::chrono::milliseconds timeout_;
    std::shared_ptr<AnySourceLedger> any_source_;  // sends and recvs counted for recv without src
    bool verbose_ = false;
    bool coalescing_ = false;
    uint64_t seq_ = 0;
    std::vector<c10::intrusive_ptr<CCLWork>> coalesced_;
};

}  // namespace ccl_torch
