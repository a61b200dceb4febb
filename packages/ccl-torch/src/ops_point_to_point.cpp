// Point to point: send, recv from a named source, and recv from any source (any_source.hpp).
#include "checks.hpp"
#include "process_group_ccl.hpp"
#include "torch_errors.hpp"

namespace ccl_torch {

// Sends and recvs always move in the background: the caller of isend/irecv computes meanwhile, and a blocking send
// waits at once anyway.
c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::send(std::vector<at::Tensor>& tensors, int dst_rank, int /*tag*/) {
    const OpName op = CCL_TORCH_OP("send");
    return launch({c10d::OpType::SEND, op, c10d::kUnsetTimeout, true}, [&] {
        (void)check_movable(single(tensors, op), op, "tensor");
        check_peer(dst_rank, getRank(), getSize(), op);
        return Checked<NoPlan>{tensors, {}, {}};
    }, [&](Issue& issue, NoPlan&) {
        Buffer buf = input_buffer(tensors[0], op);
        issue.op.add(translate_errors([&] { return issue.on.send(buf.data(), buf.count, buf.dtype, dst_rank); }));
        issue.op.keep_alive(buf.tensor);
        any_source_->sent_to(dst_rank);
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::recv(std::vector<at::Tensor>& tensors, int src_rank, int /*tag*/) {
    const OpName op = CCL_TORCH_OP("recv");
    return launch({c10d::OpType::RECV, op, c10d::kUnsetTimeout, true}, [&] {
        (void)check_movable(single(tensors, op), op, "tensor");
        check_peer(src_rank, getRank(), getSize(), op);
        return Checked<NoPlan>{tensors, tensors, {}};
    }, [&](Issue& issue, NoPlan&) {
        Buffer buf = output_buffer(tensors[0], op, issue.op.finish_steps());
        issue.op.add(translate_errors([&] { return issue.on.recv(buf.data(), buf.count, buf.dtype, src_rank); }));
        any_source_->received_from(src_rank);
        issue.op.set_source_rank(src_rank);
    });
}

// The recv is issued once some peer's send to this rank is announced and unclaimed (see any_source.hpp), at the
// latest when the caller waits; until then it costs a store read per poll.
c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::recvAnysource(std::vector<at::Tensor>& tensors, int /*tag*/) {
    const OpName op = CCL_TORCH_OP("recv");
    return launch({c10d::OpType::RECVANYSOURCE, op, c10d::kUnsetTimeout, true}, [&] {
        (void)check_movable(single(tensors, op), op, "tensor");
        CCL_CHECK_ARGUMENT(getSize() > 1, "recv without src: a group of one rank has no peer to receive from");
        return Checked<NoPlan>{tensors, tensors, {}};
    }, [&](Issue& issue, NoPlan&) {
        Buffer buf = output_buffer(tensors[0], op, issue.op.finish_steps());
        issue.op.defer([ledger = any_source_, buf, on = issue.keep]() -> std::optional<std::pair<ccl_core::Request, int>> {
            const auto src = ledger->claim_any();
            if (!src) return std::nullopt;
            return std::make_pair(translate_errors([&] { return on->recv(buf.data(), buf.count, buf.dtype, *src); }), *src);
        }, "recv without src");
    });
}

}  // namespace ccl_torch
