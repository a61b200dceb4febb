// Every collective on raw buffers with explicit dtype and reduce op, as an interface: ccl-core's Communicator
// implements it for host memory; device plugins (ccl-xpu) implement it for their device memory, so the torch
// backend runs every op the same way on either. All calls are asynchronous; counts are in elements.
#pragma once

#include <ccl_core/request.hpp>
#include <ccl_core/types.hpp>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace ccl_core {

class Collectives {
public:
    virtual ~Collectives() = default;

    virtual int rank() const = 0;
    virtual int size() const = 0;
    // Aborts on the user's behalf: every op still waiting raises CommunicatorAborted within its next poll, and so does
    // every later call.
    virtual void abort(const std::string& reason) = 0;

    virtual Request allreduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) = 0;
    virtual Request reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, int root) = 0;
    virtual Request broadcast(void* buffer, std::size_t count, DType dtype, int root) = 0;
    // recv holds size() * count elements, rank r's at offset r * count.
    virtual Request allgather(const void* send, void* recv, std::size_t count, DType dtype) = 0;
    // recv holds sum(recv_counts) elements, rank r's after those of ranks < r.
    virtual Request allgatherv(const void* send, std::size_t send_count, void* recv,
                               const std::vector<std::size_t>& recv_counts, DType dtype) = 0;
    // send holds size() * recv_count elements; rank r receives the reduction of block r.
    virtual Request reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op) = 0;
    virtual Request alltoall(const void* send, void* recv, std::size_t count, DType dtype) = 0;
    virtual Request alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                              const std::vector<std::size_t>& recv_counts, DType dtype) = 0;
    // recv (root only; ignored elsewhere) holds size() * count elements.
    virtual Request gather(const void* send, void* recv, std::size_t count, DType dtype, int root) = 0;
    // send (root only; ignored elsewhere) holds size() * count elements.
    virtual Request scatter(const void* send, void* recv, std::size_t count, DType dtype, int root) = 0;
    virtual Request send(const void* buffer, std::size_t count, DType dtype, int peer) = 0;
    virtual Request recv(void* buffer, std::size_t count, DType dtype, int peer) = 0;
    virtual Request barrier() = 0;
};

// oneCCL has no gather and scatter on every version: both are an alltoallv in which only the root receives (gather)
// or sends (scatter) `count` elements per rank. These are that alltoallv's counts for this rank.
struct AlltoallvCounts {
    std::vector<std::size_t> send, recv;
};
inline AlltoallvCounts gather_as_alltoallv(int size, int rank, int root, std::size_t count) {
    const auto n = static_cast<std::size_t>(size);
    AlltoallvCounts c{std::vector<std::size_t>(n, 0), std::vector<std::size_t>(n, rank == root ? count : 0)};
    c.send[static_cast<std::size_t>(root)] = count;
    return c;
}
inline AlltoallvCounts scatter_as_alltoallv(int size, int rank, int root, std::size_t count) {
    AlltoallvCounts c = gather_as_alltoallv(size, rank, root, count);
    std::swap(c.send, c.recv);
    return c;
}

}  // namespace ccl_core
