// Data movement around a root or among all ranks: broadcast, allgather (tensor, list, coalesced), gather, scatter.
#include "checks.hpp"
#include "process_group_ccl.hpp"
#include "torch_errors.hpp"

namespace ccl_torch {
namespace {

// Issues the allgather of one checked pair (check_allgather_pair).
void allgather_flat(Issue& issue, const char* op, at::Tensor& output, const at::Tensor& input) {
    Buffer in = input_buffer(input, op);
    Buffer out = output_buffer(output, op, issue.op.finish_steps());
    issue.op.keep_alive(in.tensor);
    issue.op.add(translate_errors([&] { return issue.on.allgather(in.data(), out.data(), in.count, in.dtype); }));
}

// Each of `outs` is dense, of `input`'s dtype and size.
void check_outputs_like(const std::vector<at::Tensor>& outs, const at::Tensor& input, const char* op) {
    for (const auto& o : outs) {
        check_dense(o, op, "output");
        check_same_dtype(input, o, op);
        check_same_numel(o, input.numel(), op, "an output tensor", "same as input");
    }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
    const OpName op = CCL_TORCH_OP("broadcast");
    return launch({c10d::OpType::BROADCAST, op, opts.timeout, opts.asyncOp}, [&] {
        (void)check_movable(single(tensors, op), op, "tensor");
        check_root(opts.rootRank, getSize(), op);
        return Checked<NoPlan>{tensors, tensors, {}};
    }, [&](Issue& issue, NoPlan&) {
        Buffer buf = output_buffer(tensors[0], op, issue.op.finish_steps());
        issue.op.add(translate_errors([&] {
            return issue.on.broadcast(buf.data(), buf.count, buf.dtype, static_cast<int>(opts.rootRank));
        }));
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                const c10d::AllgatherOptions& opts) {
    const OpName op = CCL_TORCH_OP("allgather_into_tensor");
    return launch({c10d::OpType::_ALLGATHER_BASE, op, opts.timeout, opts.asyncOp}, [&] {
        check_allgather_pair(output, input, getSize(), op);
        return Checked<NoPlan>{{input}, {output}, {}};
    }, [&](Issue& issue, NoPlan&) { allgather_flat(issue, op, output, input); });
}

bool ProcessGroupCCL::all_gather_now(at::Tensor& output, const at::Tensor& input) {
    if (watched() || !input.device().is_cpu() || !output.device().is_cpu() || !input.is_contiguous() ||
        !output.is_contiguous()) {
        return false;
    }
    const OpName op = CCL_TORCH_OP("allgather_into_tensor");
    check_allgather_pair(output, input, getSize(), op);
    const Buffer in = buffer_of(input, op);
    void* out = output.data_ptr();
    run_now(op, input, [&](ccl_core::Communicator& comm) { return comm.allgather(in.data(), out, in.count, in.dtype); });
    return true;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                std::vector<at::Tensor>& inputs,
                                                                                const c10d::AllgatherOptions& opts) {
    const OpName op = CCL_TORCH_OP("allgather_into_tensor_coalesced");
    return launch({c10d::OpType::COALESCED, op, opts.timeout, opts.asyncOp}, [&] {
        CCL_CHECK_ARGUMENT(outputs.size() == inputs.size(), op, ": ", outputs.size(), " outputs for ", inputs.size(),
                           " inputs");
        for (std::size_t i = 0; i < inputs.size(); ++i) check_allgather_pair(outputs[i], inputs[i], getSize(), op);
        return Checked<NoPlan>{inputs, outputs, {}};
    }, [&](Issue& issue, NoPlan&) {
        for (std::size_t i = 0; i < inputs.size(); ++i) allgather_flat(issue, op, outputs[i], inputs[i]);
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllgatherOptions& opts) {
    const OpName op = CCL_TORCH_OP("allgather");
    return launch({c10d::OpType::ALLGATHER, op, opts.timeout, opts.asyncOp}, [&] {
        (void)check_movable(single(inputs, op), op, "input");
        CCL_CHECK_ARGUMENT(outputs.size() == 1, op, ": expects one output list, got ", outputs.size());
        CCL_CHECK_ARGUMENT(static_cast<int>(outputs[0].size()) == getSize(), op, ": output list has ",
                           outputs[0].size(), " tensors, expected one per rank (", getSize(), ")");
        check_outputs_like(outputs[0], inputs[0], op);
        return Checked<NoPlan>{inputs, outputs[0], {}};
    }, [&](Issue& issue, NoPlan&) {
        const at::Tensor& input = inputs[0];
        at::Tensor flat = at::empty({input.numel() * getSize()}, input.options());
        allgather_flat(issue, op, flat, input);
        issue.op.finish_steps().push_back([flat, outs = outputs[0], n = input.numel()]() mutable {
            split_into(flat, outs, n);
        });
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                    std::vector<at::Tensor>& inputs,
                                                                    const c10d::AllgatherOptions& opts) {
    const OpName op = CCL_TORCH_OP("allgather_coalesced");
    return launch({c10d::OpType::ALLGATHER_COALESCED, op, opts.timeout, opts.asyncOp}, [&] {
        CCL_CHECK_ARGUMENT(outputs.size() == static_cast<std::size_t>(getSize()), op,
                           ": expects one output list per rank");
        for (int r = 0; r < getSize(); ++r) {
            CCL_CHECK_ARGUMENT(outputs[r].size() == inputs.size(), op, ": output list ", r, " has ", outputs[r].size(),
                               " tensors, expected ", inputs.size());
            for (std::size_t i = 0; i < inputs.size(); ++i) {
                (void)check_movable(inputs[i], op, "input");
                check_dense(outputs[r][i], op, "output");
                check_same_dtype(inputs[i], outputs[r][i], op);
                check_same_numel(outputs[r][i], inputs[i].numel(), op, "an output tensor", "same as its input");
            }
        }
        return Checked<NoPlan>{inputs, {}, {}};
    }, [&](Issue& issue, NoPlan&) {
        // outputs[r][i] receives rank r's inputs[i]: gather each input, then scatter into the lists.
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            at::Tensor flat = at::empty({inputs[i].numel() * getSize()}, inputs[i].options());
            allgather_flat(issue, op, flat, inputs[i]);
            issue.op.finish_steps().push_back([flat, i, n = inputs[i].numel(), outs = outputs]() mutable {
                for (std::size_t r = 0; r < outs.size(); ++r) {
                    outs[r][i].copy_(flat.narrow(0, r * n, n).view(outs[r][i].sizes()));
                }
            });
        }
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::GatherOptions& opts) {
    const OpName op = CCL_TORCH_OP("gather");
    const int root = static_cast<int>(opts.rootRank);
    return launch({c10d::OpType::GATHER, op, opts.timeout, opts.asyncOp}, [&] {
        const at::Tensor& input = single(inputs, op);
        (void)check_movable(input, op, "input");
        check_root(root, getSize(), op);
        if (getRank() != root) {
            CCL_CHECK_ARGUMENT(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), op,
                               ": only the root passes output tensors");
            return Checked<NoPlan>{inputs, {}, {}};
        }
        CCL_CHECK_ARGUMENT(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(), op,
                           ": the root needs a list of ", getSize(), " output tensors");
        check_outputs_like(outputs[0], input, op);
        return Checked<NoPlan>{inputs, outputs[0], {}};
    }, [&](Issue& issue, NoPlan&) {
        const at::Tensor& input = inputs[0];
        Buffer in = input_buffer(input, op);
        issue.op.keep_alive(in.tensor);
        at::Tensor flat = getRank() == root ? at::empty({input.numel() * getSize()}, input.options()) : at::Tensor();
        issue.op.add(translate_errors([&] {
            return issue.on.gather(in.data(), flat.defined() ? flat.data_ptr() : nullptr, in.count, in.dtype, root);
        }));
        if (flat.defined()) {
            issue.op.finish_steps().push_back([flat, outs = outputs[0], n = input.numel()]() mutable {
                split_into(flat, outs, n);
            });
        }
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::scatter(std::vector<at::Tensor>& outputs,
                                                        std::vector<std::vector<at::Tensor>>& inputs,
                                                        const c10d::ScatterOptions& opts) {
    const OpName op = CCL_TORCH_OP("scatter");
    const int root = static_cast<int>(opts.rootRank);
    // the plan: the root's inputs, concatenated (undefined elsewhere)
    return launch({c10d::OpType::SCATTER, op, opts.timeout, opts.asyncOp}, [&] {
        const at::Tensor& output = single(outputs, op);
        (void)check_movable(output, op, "output");
        check_root(root, getSize(), op);
        if (getRank() != root) {
            CCL_CHECK_ARGUMENT(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), op,
                               ": only the root passes input tensors");
            return Checked<at::Tensor>{{}, outputs, at::Tensor()};
        }
        CCL_CHECK_ARGUMENT(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), op,
                           ": the root needs a list of ", getSize(), " input tensors");
        std::vector<at::Tensor> flats;
        for (auto& i : inputs[0]) {
            check_dense(i, op, "input");
            check_same_dtype(i, output, op);
            check_same_numel(i, output.numel(), op, "an input tensor", "same as output");
            flats.push_back(i.reshape({-1}));
        }
        at::Tensor flat = at::cat(flats);
        return Checked<at::Tensor>{{flat}, outputs, flat};
    }, [&](Issue& issue, at::Tensor& flat) {
        Buffer out = output_buffer(outputs[0], op, issue.op.finish_steps());
        issue.op.add(translate_errors([&] {
            return issue.on.scatter(flat.defined() ? flat.data_ptr() : nullptr, out.data(), out.count, out.dtype, root);
        }));
        if (flat.defined()) issue.op.keep_alive(flat);
    });
}

}  // namespace ccl_torch
