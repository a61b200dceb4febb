// One collective call as the checks (validate.hpp) and the router (src/routing) see it: which op, on which buffers,
// how many elements of which type. Host and device communicators describe every call this way.
#pragma once

#include <ccl_core/types.hpp>

#include <cstddef>
#include <vector>

namespace ccl_core {

enum class OpKind { allreduce, reduce, broadcast, allgatherv, reduce_scatter, alltoall, alltoallv, gather, scatter, send,
                    recv, barrier };

struct OpArgs {
    OpKind kind = OpKind::barrier;
    const void* send = nullptr;  // send: the buffer; broadcast: the buffer (the root's input)
    void* recv = nullptr;        // recv: the buffer; broadcast: the buffer
    // allreduce, reduce, broadcast, send, recv: elements of the buffer; allgatherv: this rank's input; reduce_scatter:
    // each rank's output; alltoall, gather, scatter: one rank's block
    std::size_t count = 0;
    DType dtype = DType::uint8;
    ReduceOp op = ReduceOp::sum;
    int root = 0;  // reduce, broadcast, gather, scatter: the root; send, recv: the peer
    const std::vector<std::size_t>* send_counts = nullptr;  // alltoallv
    const std::vector<std::size_t>* recv_counts = nullptr;  // allgatherv, alltoallv
};

// The op's name in messages and requests: "allreduce", "allgather" (for allgatherv), ...
const char* op_name(OpKind kind);

}  // namespace ccl_core
