// All-to-all: one tensor split along its first dimension (alltoall_base), or lists of tensors (alltoall).
#include "checks.hpp"
#include "process_group_ccl.hpp"
#include "torch_errors.hpp"

namespace ccl_torch {
namespace {

// Elements each rank sends and receives (of the ccl-core dtype).
struct Counts {
    std::vector<std::size_t> send, recv;
    ccl_core::DType dtype = ccl_core::DType::uint8;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                              std::vector<int64_t>& output_split_sizes,
                                                              std::vector<int64_t>& input_split_sizes,
                                                              const c10d::AllToAllOptions& opts) {
    const OpName op = CCL_TORCH_OP("alltoall_base");
    return launch({c10d::OpType::ALLTOALL_BASE, op, opts.timeout, opts.asyncOp}, [&] {
        (void)check_movable(input, op, "input");
        check_dense(output, op, "output");
        check_same_dtype(input, output, op);
        Counts counts{check_split_counts(input, input_split_sizes, getSize(), op, "input"),
                      check_split_counts(output, output_split_sizes, getSize(), op, "output")};
        return Checked<Counts>{{input}, {output}, std::move(counts)};
    }, [&](Issue& issue, Counts& counts) {
        Buffer in = input_buffer(input, op);
        Buffer out = output_buffer(output, op, issue.op.finish_steps());
        issue.op.add(translate_errors([&] {
            return issue.on.alltoallv(in.data(), counts.send, out.data(), counts.recv, in.dtype);
        }));
        issue.op.keep_alive(in.tensor);
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions& opts) {
    const OpName op = CCL_TORCH_OP("alltoall");
    return launch({c10d::OpType::ALLTOALL, op, opts.timeout, opts.asyncOp}, [&] {
        CCL_CHECK_ARGUMENT(static_cast<int>(inputs.size()) == getSize() && static_cast<int>(outputs.size()) == getSize(),
                           op, ": expects one input and one output tensor per rank (", getSize(), "), got ",
                           inputs.size(), " and ", outputs.size());
        Counts counts;
        for (int r = 0; r < getSize(); ++r) {
            check_dense(inputs[r], op, "input");
            check_dense(outputs[r], op, "output");
            check_same_dtype(inputs[0], inputs[r], op);
            check_same_dtype(inputs[0], outputs[r], op);
            const std::size_t scale = inputs[r].is_complex() ? 2 : 1;
            counts.send.push_back(static_cast<std::size_t>(inputs[r].numel()) * scale);
            counts.recv.push_back(static_cast<std::size_t>(outputs[r].numel()) * scale);
        }
        counts.dtype = core_dtype(inputs[0].scalar_type(), op);
        return Checked<Counts>{inputs, outputs, std::move(counts)};
    }, [&](Issue& issue, Counts& counts) {
        std::vector<at::Tensor> flats;
        for (auto& i : inputs) flats.push_back(i.reshape({-1}));
        at::Tensor in_flat = at::cat(flats);
        int64_t total_out = 0;
        for (auto& o : outputs) total_out += o.numel();
        at::Tensor out_flat = at::empty({total_out}, outputs[0].options());
        issue.op.add(translate_errors([&] {
            return issue.on.alltoallv(in_flat.data_ptr(), counts.send, out_flat.data_ptr(), counts.recv, counts.dtype);
        }));
        issue.op.keep_alive(in_flat);
        issue.op.finish_steps().push_back([out_flat, outs = outputs]() mutable {
            int64_t offset = 0;
            for (auto& o : outs) {
                o.copy_(out_flat.narrow(0, offset, o.numel()).view(o.sizes()));
                offset += o.numel();
            }
        });
    });
}

}  // namespace ccl_torch
