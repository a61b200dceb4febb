// torch.ops.ccl: collectives as dispatcher ops, for code that calls a collective per layer (tensor-parallel decoding)
// and for torch.compile, which keeps a registered op in its graph where a torch.distributed call breaks it.
//
//   torch.ops.ccl.all_reduce_(tensor, group_name, op="sum")             (in place)
//   torch.ops.ccl.all_gather_into_tensor_(output, input, group_name)    (rank r's input at block r of output)
// Both return nothing: torch.compile functionalizes a custom op that mutates its arguments, but not one that also
// returns them.
//
// `group_name` is the process group's name (group.group_name, what functional collectives take). The op waits for
// the result before it returns. It runs on the group's backend for the tensor's device through c10d's own op,
// exactly as dist.all_reduce would (timeouts, abort, torch's flight recorder and hooks, the status board), minus
// torch.distributed's Python layer; on any backend, not only ccl. On a ccl group whose ops nobody watches (no flight
// recorder), a plain call skips c10d's op and the Work too (ProcessGroupCCL::all_reduce_now, all_gather_now).
// Meta kernels (shapes only) serve FakeTensor tracing.
#include "process_group_ccl.hpp"
#include "torch_errors.hpp"

#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/library.h>

#include <string>

namespace ccl_torch {
namespace {

c10d::ReduceOp reduce_op_named(c10::string_view name) {
    if (name == "sum") return c10d::ReduceOp::SUM;
    if (name == "avg") return c10d::ReduceOp::AVG;
    if (name == "product") return c10d::ReduceOp::PRODUCT;
    if (name == "min") return c10d::ReduceOp::MIN;
    if (name == "max") return c10d::ReduceOp::MAX;
    if (name == "band") return c10d::ReduceOp::BAND;
    if (name == "bor") return c10d::ReduceOp::BOR;
    if (name == "bxor") return c10d::ReduceOp::BXOR;
    C10_THROW_ERROR(ValueError, "ccl.all_reduce_: unknown reduce op '" + std::string(name) +
                                    "'; choose sum, avg, product, min, max, band, bor or bxor");
}

c10::intrusive_ptr<c10d::ProcessGroup> group_named(c10::string_view name, const char* op) {
    try {
        return c10d::resolve_process_group(std::string(name));
    } catch (const c10::Error&) {
        C10_THROW_ERROR(ValueError, std::string("ccl.") + op + ": no process group is named '" + std::string(name) +
                                        "' in this process (pass group.group_name of a live group)");
    }
}

// The group's ccl backend for `t`'s device, if that is what serves it (not a wrapper, not another backend).
ProcessGroupCCL* ccl_backend(c10d::ProcessGroup& group, const at::Tensor& t) {
    try {
        return dynamic_cast<ProcessGroupCCL*>(group.getBackend(t.device().type()).get());
    } catch (const c10::Error&) {  // no backend for that device: the general path says so
        return nullptr;
    }
}

void all_reduce_(at::Tensor& tensor, c10::string_view group_name, c10::string_view op) {
    const c10d::ReduceOp rop = reduce_op_named(op);
    auto group = group_named(group_name, "all_reduce_");
    if (auto* ccl = ccl_backend(*group, tensor); ccl && ccl->all_reduce_now(tensor, rop)) return;
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = rop;
    opts.asyncOp = false;  // waited at once: the caller drives it, no hand-over to a progress thread
    group->allreduce(tensors, opts)->wait();
}

void all_gather_into_tensor_(at::Tensor& output, const at::Tensor& input, c10::string_view group_name) {
    auto group = group_named(group_name, "all_gather_into_tensor_");
    if (auto* ccl = ccl_backend(*group, input); ccl && ccl->all_gather_now(output, input)) return;
    at::Tensor in = input;
    c10d::AllgatherOptions opts;
    opts.asyncOp = false;
    group->_allgather_base(output, in, opts)->wait();
}

// Shapes only: what FakeTensor tracing (torch.compile) runs. The real op checks sizes against the group.
void all_reduce_meta(at::Tensor&, c10::string_view, c10::string_view op) { reduce_op_named(op); }

void all_gather_into_tensor_meta(at::Tensor&, const at::Tensor&, c10::string_view) {}

}  // namespace

TORCH_LIBRARY(ccl, m) {
    m.def("all_reduce_(Tensor(a!) tensor, str group_name, str op=\"sum\") -> ()");
    m.def("all_gather_into_tensor_(Tensor(a!) output, Tensor input, str group_name) -> ()");
}

// CompositeExplicitAutograd: every device a group's backend serves (ccl-xpu's tensors too), not only CPU.
TORCH_LIBRARY_IMPL(ccl, CompositeExplicitAutograd, m) {
    m.impl("all_reduce_", all_reduce_);
    m.impl("all_gather_into_tensor_", all_gather_into_tensor_);
}

TORCH_LIBRARY_IMPL(ccl, Meta, m) {
    m.impl("all_reduce_", all_reduce_meta);
    m.impl("all_gather_into_tensor_", all_gather_into_tensor_meta);
}

}  // namespace ccl_torch
