#include <ccl_core/errors.hpp>
#include <ccl_core/validate.hpp>

#include <numeric>
#include <string>

namespace ccl_core {

const char* op_name(OpKind kind) {
    switch (kind) {
        case OpKind::allreduce: return "allreduce";
        case OpKind::reduce: return "reduce";
        case OpKind::broadcast: return "broadcast";
        case OpKind::allgatherv: return "allgather";
        case OpKind::reduce_scatter: return "reduce_scatter";
        case OpKind::alltoall: return "alltoall";
        case OpKind::alltoallv: return "alltoallv";
        case OpKind::gather: return "gather";
        case OpKind::scatter: return "scatter";
        case OpKind::send: return "send";
        case OpKind::recv: return "recv";
        case OpKind::barrier: return "barrier";
    }
    return "collective";
}

void check_rank(const char* op, const char* what, int r, int size) {
    if (r < 0 || r >= size) {
        throw InvalidArgument(std::string(op) + ": " + what + " " + std::to_string(r) + " is out of range for a group of " +
                              std::to_string(size) + " rank(s) (0.." + std::to_string(size - 1) + ")");
    }
}

void check_counts(const char* op, const char* name, const std::vector<std::size_t>& counts, int size) {
    if (counts.size() != static_cast<std::size_t>(size)) {
        throw InvalidArgument(std::string(op) + ": " + name + " has " + std::to_string(counts.size()) +
                              " entries; expected one per rank (" + std::to_string(size) + ")");
    }
}

void check_buffer(const char* op, const char* name, const void* p, std::size_t count) {
    if (p == nullptr && count > 0) {
        throw InvalidArgument(std::string(op) + ": " + name + " is null but must hold " + std::to_string(count) + " elements");
    }
}

namespace {

std::size_t total(const std::vector<std::size_t>& v) { return std::accumulate(v.begin(), v.end(), std::size_t{0}); }

void check_reduction(const char* op, DType dtype, ReduceOp rop) {
    if (rop == ReduceOp::avg && !is_floating(dtype)) {
        throw Unsupported(std::string(op) + ": reduce op avg needs a floating dtype, got " + dtype_name(dtype) +
                          " (use sum and divide, or convert to a floating type)");
    }
}

}  // namespace

void validate(const OpArgs& a, int rank, int size, const BufferCheck& extra) {
    const char* op = op_name(a.kind);
    auto buffer = [&](const char* name, const void* p, std::size_t count) {
        check_buffer(op, name, p, count);
        if (extra) extra(op, name, p, count);
    };
    const std::size_t n = static_cast<std::size_t>(size);
    switch (a.kind) {
        case OpKind::allreduce:
            buffer("send", a.send, a.count);
            buffer("recv", a.recv, a.count);
            check_reduction(op, a.dtype, a.op);
            return;
        case OpKind::reduce:
            check_rank(op, "root", a.root, size);
            buffer("send", a.send, a.count);
            buffer("recv", a.recv, a.count);
            check_reduction(op, a.dtype, a.op);
            return;
        case OpKind::broadcast:
            check_rank(op, "root", a.root, size);
            buffer("buffer", a.recv, a.count);
            return;
        case OpKind::allgatherv: {
            const std::vector<std::size_t>& counts = *a.recv_counts;
            check_counts(op, "recv_counts", counts, size);
            if (counts[static_cast<std::size_t>(rank)] != a.count) {
                throw InvalidArgument(std::string(op) + ": recv_counts[" + std::to_string(rank) + "] is " +
                                      std::to_string(counts[static_cast<std::size_t>(rank)]) + " but this rank sends " +
                                      std::to_string(a.count) + " elements");
            }
            buffer("send", a.send, a.count);
            buffer("recv", a.recv, total(counts));
            return;
        }
        case OpKind::reduce_scatter:
            buffer("send", a.send, a.count * n);
            buffer("recv", a.recv, a.count);
            check_reduction(op, a.dtype, a.op);
            return;
        case OpKind::alltoall:
            buffer("send", a.send, a.count * n);
            buffer("recv", a.recv, a.count * n);
            return;
        case OpKind::alltoallv:
            check_counts(op, "send_counts", *a.send_counts, size);
            check_counts(op, "recv_counts", *a.recv_counts, size);
            buffer("send", a.send, total(*a.send_counts));
            buffer("recv", a.recv, total(*a.recv_counts));
            return;
        case OpKind::gather:
            check_rank(op, "root", a.root, size);
            buffer("send", a.send, a.count);
            if (rank == a.root) buffer("recv", a.recv, a.count * n);
            return;
        case OpKind::scatter:
            check_rank(op, "root", a.root, size);
            buffer("recv", a.recv, a.count);
            if (rank == a.root) buffer("send", a.send, a.count * n);
            return;
        case OpKind::send:
        case OpKind::recv:
            check_rank(op, "peer", a.root, size);
            if (a.root == rank) {
                throw InvalidArgument(std::string(op) + ": peer " + std::to_string(a.root) + " is this rank; " +
                                      (a.kind == OpKind::send ? "send to" : "receive from") + " a different rank");
            }
            buffer("buffer", a.kind == OpKind::send ? a.send : a.recv, a.count);
            return;
        case OpKind::barrier:
            return;
    }
}

}  // namespace ccl_core
