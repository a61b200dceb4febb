// The `ccl` c10d backend for CPU tensors (and other devices through plugins, see device_plugin.hpp).
//
// Every op runs one skeleton, launch(): its check runs every argument check on every tensor and computes what the
// issue needs (a Checked: the tensors the work records, and the op's plan: reduction, counts, staging); then the
// collectives of the tensors' device are chosen, the work is made (which advances the sequence number) and the
// issue starts the op on ccl-core with that plan. A bad tensor thus raises on every rank that sees it and leaves no
// rank out of step. The ops live in one file per family (ops_*.cpp).
#pragma once

#include "any_source.hpp"
#include "hooks.hpp"
#include "status_board.hpp"
#include "work.hpp"

#include <ccl_core/collectives.hpp>
#include <ccl_core/communicator.hpp>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <ostream>
#include <map>
#include <memory>
#include <mutex>

// What a torch minor's Backend offers beyond 2.8's (CCL_TORCH_MINOR comes from meson): 2.9 brought split, merge,
// getBackendOptions and setTimeout, 2.10 shrink. Reconfigure, hooks and windows come with torch's own macros
// (C10D_BACKEND_HAS_*), completion hooks with 2.15. On an older torch these are absent, and torch's Python side, which
// knows its own Backend, never asks for them.
#define CCL_TORCH_HAS_SPLIT (CCL_TORCH_MINOR >= 9)
#define CCL_TORCH_HAS_SHRINK (CCL_TORCH_MINOR >= 10)

namespace ccl_torch {

// What an op's check hands to its issue.
template <class Plan>
struct Checked {
    std::vector<at::Tensor> inputs, outputs;  // what the work records (profiler, result())
    Plan plan;                                // what the issue needs, computed once
};
struct NoPlan {};

// What an op's issue works with: the operation its requests go into, and the collectives of its device (`keep`
// holds them for what must outlive the issue: a recv without src issues later).
// An op's name in messages, and its title in torch's profiler ("oneccl_bindings_for_pytorch::allreduce", as the
// original bindings name it). Both are literals: torch's RecordFunction keeps the title's pointer until the op
// completes, long after the call that issued it returned (CCL_TORCH_OP makes one).
struct OpName {
    const char* name;
    const char* title;
    operator const char*() const { return name; }  // what the checks and messages take
    friend std::ostream& operator<<(std::ostream& out, const OpName& op) { return out << op.name; }
};
#define CCL_TORCH_OP(literal) ::ccl_torch::OpName{literal, "oneccl_bindings_for_pytorch::" literal}

struct Issue {
    WorkOperation& op;
    ccl_core::Collectives& on;
    std::shared_ptr<ccl_core::Collectives> keep;
};

class ProcessGroupCCL : public c10d::Backend {
public:
    // With enable_reconfigure (torch's init_process_group(..., enable_reconfigure=True)), the group has no
    // communicator until reconfigure() names its members.
    ProcessGroupCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout, const std::string& name = "default",
                    bool enable_reconfigure = false);
    ~ProcessGroupCCL() override;

    const std::string getBackendName() const override { return "ccl"; }
#if CCL_TORCH_HAS_SPLIT
    c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override;
    // For ops issued from now on (torch.distributed.set_timeout); an op's own timeout still wins.
    void setTimeout(std::chrono::milliseconds timeout) override;
#endif
    // Sequence numbers let torch's debug wrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL) match ops across ranks;
    // like gloo, every group starts at 0 and counts the ops issued on it.
    void setSequenceNumberForGroup() override { seq_ = 0; }
    uint64_t getSequenceNumberForGroup() override { return seq_; }
    // Works report issue-to-completion times (getDuration, and the completion hooks' duration_ms).
    void enableCollectivesTiming() override { timing_ = true; }

    // ---- the group's life (membership.cpp) -------------------------------------------------------------------
    // split, merge and shrink make new groups over the store torch hands them; reconfigure rebuilds this one in
    // place with the members its handles name (fault tolerance: survivors of a lost rank, a replacement rank).
#if CCL_TORCH_HAS_SPLIT
    bool supportsSplitting() const override { return true; }
    c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                            const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
    c10::intrusive_ptr<c10d::Backend> merge(const c10::intrusive_ptr<c10d::Store>& store,
                                            const c10::intrusive_ptr<c10d::Backend::Options>& opts, const int& rank,
                                            const int& size) override;
#endif
#if CCL_TORCH_HAS_SHRINK
    bool supportsShrinking() const override { return true; }
    c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
                                             const c10::intrusive_ptr<c10d::Backend::Options>& opts_override) override;
#endif
#ifdef C10D_BACKEND_HAS_RECONFIGURE
    bool supportsReconfigure() const override { return true; }
    c10d::ReconfigureHandle get_reconfigure_handle() const override { return handle_; }
    c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
#endif
#if CCL_TORCH_MINOR >= 15
    bool isInitialized() override;
#endif
    // TIMEOUT after an op ran out of time, REMOTE_ERROR after a rank of the group died, COMM_ERROR after another
    // failure or abort(); SUCCESS while the group works.
    c10d::ErrorType getError() override;
    // Every op waiting on the group raises within 0.2 s, and so does every later one, naming itself.
    void abort() override;
    // Lets the communicator go (destroyed once no op holds it); later ops raise.
    void shutdown() override;

    // ---- torch's hooks (hooks.hpp) ---------------------------------------------------------------------------
#ifdef C10D_BACKEND_HAS_HOOKS
#if CCL_TORCH_MINOR >= 15
    bool supportsAbortHooks() const override { return true; }
#endif
    void registerAbortHook(int64_t hook_id, c10d::AbortHook hook) override;
    void unregisterAbortHook(int64_t hook_id) override;
#endif
#if CCL_TORCH_MINOR >= 15
    bool supportsCompletionHooks() const override { return true; }
    void registerCompletionHook(int64_t hook_id, c10d::CompletionHook hook) override;
    void unregisterCompletionHook(int64_t hook_id) override;
#endif

#ifdef C10D_BACKEND_HAS_WINDOW
    // ---- one-sided windows (window.cpp, torch 2.15) on registered memory: for groups on one host ---------------
    bool supportsWindow() const override;
    c10::intrusive_ptr<c10d::Window> new_window(const std::optional<at::Tensor>& tensor) override;
#endif

    // ---- registered memory (registered_memory.cpp) --------------------------------------------------------------
    // CPU tensors in shared memory every rank of the group can read (FSDP2's set_allocate_memory_from_process_group_
    // for_comm asks for its all-gather and reduce-scatter buffers here): collectives on them read their peers'
    // tensors in place. True for CPU when the group's ranks share a host and its shared-memory path is on.
    bool supportsTensorAlloc(c10::DeviceIndex device_index) override;
    // A 1-D tensor of `size` elements; ordinary memory when the group cannot (or /dev/shm is full: one warning).
    at::Tensor allocateTensor(long size, at::TensorOptions options = {}) override;
    // Whether `t`'s elements lie in this group's registered memory.
    bool registered(const at::Tensor& t) const;
    // The group can offer registered memory (and windows on it): its ranks share a host, its shared-memory path is on.
    bool has_registered_memory() const;

    // monitored_barrier.cpp: rank 0 waits for every rank's arrival through the store and names the ranks that did
    // not come; the others wait for rank 0's release.
    void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

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

    // torch.ops.ccl.all_reduce_ and all_gather_into_tensor_ (registered_ops.cpp) in the plain case: contiguous CPU
    // tensors, a reduction ccl-core does itself, and nobody watching the group's ops (watched()). Runs and waits for
    // it without making a Work, counted in the group's sequence and status board like any op. False, having done
    // nothing, when the case is not plain; bad input raises as the c10d op would.
    bool all_reduce_now(at::Tensor& tensor, const c10d::ReduceOp& rop);
    bool all_gather_now(at::Tensor& output, const at::Tensor& input);

    // The group's communicator; raises naming `op` when the group has none (not yet reconfigured, shut down).
    std::shared_ptr<ccl_core::Communicator> communicator(const char* op = "this group") const;

private:
    // Someone observes each op: torch's completion hooks (the flight recorder uses them), timing, verbose lines, or
    // an open coalescing block. The *_now paths then leave the op to c10d's.
    bool watched() const {
        return coalescing_ || verbose_ || timing_.load(std::memory_order_relaxed) || hooks_->any_completion_hook();
    }
    // A *_now op: issued on the group's communicator, counted in its sequence and status board (`moved` says what
    // it moves), and waited for as a Work would be (the group's timeout, Ctrl-C).
    void run_now(const OpName& op, const at::Tensor& moved,
                 const std::function<ccl_core::Request(ccl_core::Communicator&)>& issue);

    // Which op, and how it is waited for: `async` (the options' asyncOp; false for a blocking call, which waits
    // at once) lets ccl-core's progress thread move it while the caller computes.
    struct OpSpec {
        c10d::OpType type;
        OpName op;
        std::chrono::milliseconds timeout;  // c10d::kUnsetTimeout: the group's
        bool async;
    };
    // The skeleton of every op (see the top of this file). `check()` returns a Checked<Plan>; `issue(Issue&, Plan&)`
    // starts it.
    template <class Check, class IssueSteps>
    c10::intrusive_ptr<c10d::Work> launch(const OpSpec& spec, Check&& check, IssueSteps&& issue) {
        auto checked = check();
        auto on = collectives_for(spec.op, checked.inputs, checked.outputs);
        auto work = make_work(spec, checked.inputs, std::move(checked.outputs));
        Issue steps{work->operation(), *on, on};
        issue(steps, checked.plan);
        if (spec.async) {
            work->move_in_background();
        } else {
            abort_if_interrupted(spec, *on);
        }
        return work;
    }
    c10::intrusive_ptr<CCLWork> make_work(const OpSpec& spec, const std::vector<at::Tensor>& inputs,
                                          std::vector<at::Tensor> outputs);
    // A blocking call that a Ctrl-C reached before its wait began (while Python's lock was released for the issue, or
    // just before the call): Python would raise KeyboardInterrupt as the call returns and never wait, leaving the op in
    // flight in a group that seems usable. So the group is aborted here, and the interrupt raised from the call.
    void abort_if_interrupted(const OpSpec& spec, ccl_core::Collectives& on);
    // The collectives for the op's device: ccl-core's communicator for CPU tensors, a plugin's for others (made at
    // the group's first op on that device). Checks that every tensor is on one device.
    std::shared_ptr<ccl_core::Collectives> collectives_for(const char* op, const std::vector<at::Tensor>& inputs,
                                                           const std::vector<at::Tensor>& outputs);
    // Puts `comm` in place (bootstrap, reconfigure): new rank and size, a fresh sequence, the abort listener.
    void adopt(std::shared_ptr<ccl_core::Communicator> comm, int rank, int size);
#if CCL_TORCH_HAS_SPLIT
    // A new group over `store` (split, merge, shrink), with this group's timeout unless `opts` names one.
    c10::intrusive_ptr<ProcessGroupCCL> make_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                   const c10::intrusive_ptr<c10d::Backend::Options>& opts,
                                                   const std::string& suffix) const;
#endif
    c10::intrusive_ptr<c10d::Work> allreduce_all(const OpSpec& spec, std::vector<at::Tensor>& tensors,
                                                 const c10d::ReduceOp& rop);

    c10::intrusive_ptr<c10d::Store> c10d_store_;  // the store torch handed us (split, shrink and merge build on it)
    std::shared_ptr<ccl_core::Store> store_;
    std::string name_;
    mutable std::mutex comm_mutex_;  // guards comm_, which reconfigure and shutdown replace
    std::shared_ptr<ccl_core::Communicator> comm_;  // null before reconfigure (enable_reconfigure) and after shutdown
    std::string no_comm_why_;  // why comm_ is null, for the error of an op issued then
    std::mutex device_mutex_;
    std::map<c10::DeviceType, std::shared_ptr<ccl_core::Collectives>> device_collectives_;  // from device plugins
    std::atomic<std::chrono::milliseconds::rep> timeout_ms_;
    c10::intrusive_ptr<c10d::Backend::Options> options_;
    std::shared_ptr<AnySourceLedger> any_source_;  // sends and recvs counted for recv without src
    std::shared_ptr<HookTables> hooks_ = std::make_shared<HookTables>();
    std::shared_ptr<StatusBoard> board_;  // where this rank is (made with each communicator); atomic_load/store
    std::string handle_;  // this rank's reconfigure handle: "ccl:<host>:<pid>:<nonce>"
    std::vector<int64_t> reconfigured_with_;  // uuids used so far: each must be fresh
    int shrinks_ = 0;  // numbers the stores of shrunk groups (the same on every survivor)
    uint64_t monitored_barriers_ = 0;  // numbers their keys in the store (the same on every rank)
    bool verbose_ = false;
    std::atomic<bool> timing_{false};
    bool coalescing_ = false;
    uint64_t seq_ = 0;
    std::vector<c10::intrusive_ptr<CCLWork>> coalesced_;
};

}  // namespace ccl_torch
