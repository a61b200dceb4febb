// The `ccl` c10d backend for CPU tensors (and other devices through plugins, see device_plugin.hpp). Each op: check the arguments (errors name op and tensor), stage
// the buffers, issue on ccl-core, and return a CCLWork that finishes the result when the op completes.
#pragma once

#include "any_source.hpp"
#include "work.hpp"

#include <ccl_core/communicator.hpp>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <map>
#include <mutex>
#include <memory>

namespace ccl_torch {

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

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceCoalescedOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
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
    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                  const c10d::ReduceScatterOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::ReduceScatterOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                   std::vector<at::Tensor>& inputs,
                                                                   const c10d::ReduceScatterOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& output_split_sizes,
                                                 std::vector<int64_t>& input_split_sizes,
                                                 const c10d::AllToAllOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                            const c10d::AllToAllOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

    // Coalescing: works issued between start and end are returned as one Work by endCoalescing.
    void startCoalescing() override;
    c10::intrusive_ptr<c10d::Work> endCoalescing() override;

    ccl_core::Communicator& communicator() { return *comm_; }

private:
    // Every op starts through launch(): `check` runs all of the op's argument checks on all its tensors and returns
    // the tensors its work records; only then is the work made (which advances the sequence number) and does
    // `issue` start anything. A bad tensor thus raises on every rank that sees it and leaves no rank out of step.
    struct OpTensors {
        std::vector<at::Tensor> inputs, outputs;
    };
    // `async_op` (the options' asyncOp: false for a blocking call, which waits at once) hands the work's
    // operations to ccl-core's progress thread, so that they move while the caller computes.
    template <class Check, class Issue>
    c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const char* op, std::chrono::milliseconds timeout,
                                          bool async_op, Check&& check, Issue&& issue);
    c10::intrusive_ptr<CCLWork> make_work(c10d::OpType type, const char* op, const std::vector<at::Tensor>& inputs,
                                          std::vector<at::Tensor> outputs, std::chrono::milliseconds op_timeout);
    std::chrono::milliseconds effective_timeout(std::chrono::milliseconds op_timeout) const;
    c10::intrusive_ptr<c10d::Work> allreduce_all(const char* op, c10d::OpType type, std::vector<at::Tensor>& tensors,
                                                 const c10d::ReduceOp& rop, std::chrono::milliseconds timeout,
                                                 bool async_op);
    // Issue steps for tensors that launch()'s check already accepted.
    void reduce_into(CCLWork& work, const char* op, at::Tensor& tensor, const c10d::ReduceOp& rop, int root);
    void allgather_flat(CCLWork& work, const char* op, at::Tensor& output, const at::Tensor& input);
    void reduce_scatter_flat(CCLWork& work, const char* op, at::Tensor& output, const at::Tensor& input,
                             const c10d::ReduceOp& rop);

    ccl_core::Collectives& engine_for(const char* op, const std::vector<at::Tensor>& inputs,
                                      const std::vector<at::Tensor>& outputs);

    std::shared_ptr<ccl_core::Store> store_;
    std::shared_ptr<ccl_core::Communicator> comm_;
    std::mutex device_mutex_;
    std::map<c10::DeviceType, std::shared_ptr<ccl_core::Collectives>> device_engines_;  // from device plugins
    std::chrono::milliseconds timeout_;
    std::shared_ptr<FutureCompleter> completer_;
    std::shared_ptr<AnySourceLedger> any_source_;  // sends and recvs counted for recv without src
    bool verbose_ = false;
    bool coalescing_ = false;
    uint64_t seq_ = 0;
    std::vector<c10::intrusive_ptr<CCLWork>> coalesced_;
};

}  // namespace ccl_torch
