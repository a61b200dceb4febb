// Reductions: allreduce (and its coalesced form), reduce, reduce_scatter (list, tensor, coalesced).
#include "checks.hpp"
#include "interrupts.hpp"
#include "process_group_ccl.hpp"
#include "tensors.hpp"
#include "torch_errors.hpp"

namespace ccl_torch {
namespace {

// Issues the reduction of one checked tensor: allreduce when root < 0, else reduce to root.
void reduce_into(Issue& issue, const char* op, at::Tensor& tensor, const Reduction& plan, int root, int rank, int size) {
    WorkOperation& work = issue.op;
    if (plan.kind == ReduceKind::bitwise) {
        Buffer in = input_buffer(tensor, op);
        at::Tensor gathered = at::empty({size, tensor.numel()}, tensor.options());
        work.add(translate_errors([&] { return issue.on.allgather(in.data(), gathered.data_ptr(), in.count, in.dtype); }));
        work.keep_alive(in.tensor);
        work.finish_steps().push_back([plan, gathered, tensor]() mutable { bitwise_reduce(plan, gathered, tensor); });
        return;
    }
    Buffer buf = output_buffer(tensor, op, work.finish_steps());
    apply_premul(plan, buf.tensor);
    if (plan.divide_by_size && (root < 0 || root == rank)) {
        // before any copy back from a staging buffer
        work.finish_steps().insert(work.finish_steps().begin(), [buf, size]() mutable { buf.tensor.div_(size); });
    }
    work.add(translate_errors([&] {
        return root < 0 ? issue.on.allreduce(buf.data(), buf.data(), buf.count, buf.dtype, plan.core_op)
                        : issue.on.reduce(buf.data(), buf.data(), buf.count, buf.dtype, plan.core_op, root);
    }));
}

// Issues the reduce-scatter of one checked pair (check_reduce_scatter_pair).
void reduce_scatter_flat(Issue& issue, const char* op, at::Tensor& output, const at::Tensor& input,
                         const Reduction& plan, int rank, int size) {
    WorkOperation& work = issue.op;
    if (plan.kind == ReduceKind::bitwise) {
        Buffer in = input_buffer(input, op);
        at::Tensor gathered = at::empty({size, input.numel()}, input.options());
        work.add(translate_errors([&] { return issue.on.allgather(in.data(), gathered.data_ptr(), in.count, in.dtype); }));
        const int64_t n = output.numel();
        work.keep_alive(in.tensor);
        work.finish_steps().push_back([plan, gathered, output, n, rank]() mutable {
            bitwise_reduce(plan, gathered.narrow(1, rank * n, n), output);
        });
        return;
    }
    at::Tensor src = input.contiguous();
    if (plan.torch_op == c10d::ReduceOp::PREMUL_SUM) {
        src = src.clone();  // never scale the caller's input
        apply_premul(plan, src);
    }
    Buffer in = input_buffer(src, op);
    Buffer out = output_buffer(output, op, work.finish_steps());
    if (plan.divide_by_size) {
        work.finish_steps().insert(work.finish_steps().begin(), [out, size]() mutable { out.tensor.div_(size); });
    }
    work.add(translate_errors([&] {
        return issue.on.reduce_scatter(in.data(), out.data(), out.count, out.dtype, plan.core_op);
    }));
    work.keep_alive(src);
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::allreduce_all(const OpSpec& spec, std::vector<at::Tensor>& tensors,
                                                              const c10d::ReduceOp& rop) {
    const char* op = spec.op.name;
    return launch(spec, [&] {
        CCL_CHECK_ARGUMENT(!tensors.empty(), op, ": no tensors given");
        Checked<std::vector<Reduction>> checked{tensors, tensors, {}};
        for (const auto& t : tensors) checked.plan.push_back(check_reducible(t, rop, op));
        return checked;
    }, [&](Issue& issue, std::vector<Reduction>& plans) {
        for (std::size_t i = 0; i < tensors.size(); ++i) reduce_into(issue, op, tensors[i], plans[i], -1, getRank(), getSize());
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
    return allreduce_all({c10d::OpType::ALLREDUCE, CCL_TORCH_OP("allreduce"), opts.timeout, opts.asyncOp}, tensors, opts.reduceOp);
}

bool ProcessGroupCCL::all_reduce_now(at::Tensor& tensor, const c10d::ReduceOp& rop) {
    if (watched() || !tensor.device().is_cpu() || !tensor.is_contiguous()) return false;
    const OpName op = CCL_TORCH_OP("allreduce");
    const Reduction plan = check_reducible(tensor, rop, op);
    if (plan.kind != ReduceKind::collective || plan.torch_op == c10d::ReduceOp::PREMUL_SUM || plan.divide_by_size) {
        return false;
    }
    const Buffer buf = buffer_of(tensor, op);
    run_now(op, tensor, [&](ccl_core::Communicator& comm) {
        return comm.allreduce(buf.data(), buf.data(), buf.count, buf.dtype, plan.core_op);
    });
    return true;
}

void ProcessGroupCCL::run_now(const OpName& op, const at::Tensor& moved,
                              const std::function<ccl_core::Request(ccl_core::Communicator&)>& issue) {
    auto comm = communicator(op);
    const uint64_t seq = ++seq_;
    auto board = std::atomic_load(&board_);
    if (board) board->issued(seq, op.name, {moved.scalar_type(), moved.numel(), 1});
    ccl_core::Request request = translate_errors([&] { return issue(*comm); });
    request.set_timeout(std::chrono::milliseconds(timeout_ms_.load()));
    bool interrupted = false;  // Ctrl-C: ccl-core aborts the group, and the interrupt propagates
    translate_errors([&] { request.wait(std::nullopt, [&] { check_for_interrupt(interrupted); }); });
    if (board) board->completed(seq);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                    const c10d::AllreduceCoalescedOptions& opts) {
    return allreduce_all({c10d::OpType::ALLREDUCE_COALESCED, CCL_TORCH_OP("allreduce_coalesced"), opts.timeout, opts.asyncOp}, tensors,
                         opts.reduceOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
    const OpName op = CCL_TORCH_OP("reduce");
    return launch({c10d::OpType::REDUCE, op, opts.timeout, opts.asyncOp}, [&] {
        const at::Tensor& t = single(tensors, op);
        check_root(opts.rootRank, getSize(), op);
        return Checked<Reduction>{tensors, tensors, check_reducible(t, opts.reduceOp, op)};
    }, [&](Issue& issue, Reduction& plan) {
        reduce_into(issue, op, tensors[0], plan, static_cast<int>(opts.rootRank), getRank(), getSize());
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::ReduceScatterOptions& opts) {
    const OpName op = CCL_TORCH_OP("reduce_scatter_tensor");
    return launch({c10d::OpType::_REDUCE_SCATTER_BASE, op, opts.timeout, opts.asyncOp}, [&] {
        return Checked<Reduction>{{input}, {output}, check_reduce_scatter_pair(output, input, opts.reduceOp, getSize(), op)};
    }, [&](Issue& issue, Reduction& plan) { reduce_scatter_flat(issue, op, output, input, plan, getRank(), getSize()); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                std::vector<at::Tensor>& inputs,
                                                                                const c10d::ReduceScatterOptions& opts) {
    const OpName op = CCL_TORCH_OP("reduce_scatter_tensor_coalesced");
    return launch({c10d::OpType::COALESCED, op, opts.timeout, opts.asyncOp}, [&] {
        CCL_CHECK_ARGUMENT(outputs.size() == inputs.size(), op, ": ", outputs.size(), " outputs for ", inputs.size(),
                           " inputs");
        Checked<std::vector<Reduction>> checked{inputs, outputs, {}};
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            checked.plan.push_back(check_reduce_scatter_pair(outputs[i], inputs[i], opts.reduceOp, getSize(), op));
        }
        return checked;
    }, [&](Issue& issue, std::vector<Reduction>& plans) {
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            reduce_scatter_flat(issue, op, outputs[i], inputs[i], plans[i], getRank(), getSize());
        }
    });
}

namespace {

// reduce_scatter with a list of inputs: their concatenation, and where this rank's part starts in it.
struct ListPlan {
    Reduction reduction;
    at::Tensor flat;
    bool even = true;     // every rank's part has the same size: one reduce-scatter
    int64_t offset = 0;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                               std::vector<std::vector<at::Tensor>>& inputs,
                                                               const c10d::ReduceScatterOptions& opts) {
    const OpName op = CCL_TORCH_OP("reduce_scatter");
    return launch({c10d::OpType::REDUCE_SCATTER, op, opts.timeout, opts.asyncOp}, [&] {
        const at::Tensor& output = single(outputs, op);
        check_dense(output, op, "output");
        CCL_CHECK_ARGUMENT(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), op,
                           ": expects a list of ", getSize(), " input tensors (one per rank)");
        const auto& ins = inputs[0];
        ListPlan plan;
        for (int r = 0; r < getSize(); ++r) {
            check_dense(ins[r], op, "input");
            check_same_dtype(ins[r], output, op);
            plan.even = plan.even && ins[r].numel() == ins[0].numel();
            if (r < getRank()) plan.offset += ins[r].numel();
        }
        check_same_numel(ins[getRank()], output.numel(), op, "this rank's input tensor", "same as its output");
        plan.reduction = check_reducible(output, opts.reduceOp, op);
        std::vector<at::Tensor> flats;
        for (const auto& i : ins) flats.push_back(i.reshape({-1}));
        plan.flat = at::cat(flats);
        return Checked<ListPlan>{ins, outputs, std::move(plan)};
    }, [&](Issue& issue, ListPlan& plan) {
        at::Tensor& output = outputs[0];
        if (plan.even) {
            reduce_scatter_flat(issue, op, output, plan.flat, plan.reduction, getRank(), getSize());
            return;
        }
        // Outputs of different sizes per rank (the original allowed it; oneCCL's reduce_scatter does not): reduce
        // the whole list, keep this rank's part. It moves size x the data of the even case.
        reduce_into(issue, op, plan.flat, plan.reduction, -1, getRank(), getSize());
        issue.op.finish_steps().push_back([flat = plan.flat, output, offset = plan.offset]() mutable {
            output.copy_(flat.narrow(0, offset, output.numel()).view(output.sizes()));
        });
    });
}

}  // namespace ccl_torch
