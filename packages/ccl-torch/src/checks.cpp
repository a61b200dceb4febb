#include "checks.hpp"

#include "tensors.hpp"
#include "torch_errors.hpp"

#include <numeric>

namespace ccl_torch {

void check_dense(const at::Tensor& t, const char* op, const char* what) {
    CCL_CHECK_ARGUMENT(t.defined(), op, ": ", what, " is an undefined tensor");
    CCL_CHECK_ARGUMENT(t.layout() == at::kStrided, op, ": ", what, " has layout ", t.layout(),
                      "; only dense (strided) tensors are supported");
}

void check_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* op) {
    // "Tensors are not equal in data type": the original's wording, which its users' tests match
    CCL_CHECK_DTYPE(a.scalar_type() == b.scalar_type(), op, ": Tensors are not equal in data type (",
                    a.scalar_type(), " and ", b.scalar_type(), "); every tensor of one op must share one dtype");
}

void check_same_numel(const at::Tensor& t, int64_t expected, const char* op, const char* what, const char* why) {
    CCL_CHECK_ARGUMENT(t.numel() == expected, op, ": ", what, " has ", t.numel(), " elements, expected ", expected,
                      " (", why, ")");
}

ccl_core::DType check_movable(const at::Tensor& t, const char* op, const char* what) {
    check_dense(t, op, what);
    return core_dtype(t.scalar_type(), op);
}

Reduction check_reducible(const at::Tensor& t, const c10d::ReduceOp& rop, const char* op) {
    (void)check_movable(t, op, "tensor");
    return plan_reduction(rop, t, op);
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* op) {
    CCL_CHECK_ARGUMENT(ts.size() == 1, op, ": expects exactly one tensor, got ", ts.size());
    return ts[0];
}

void check_root(int64_t root, int size, const char* op) {
    CCL_CHECK_ARGUMENT(root >= 0 && root < size, op, ": unexpected rank ", root, " as root; a group of ", size,
                       " ranks has ranks 0..", size - 1);
}

void check_peer(int peer, int rank, int size, const char* op) {
    CCL_CHECK_ARGUMENT(peer >= 0 && peer < size && peer != rank, op, ": unexpected rank ", peer, " as peer of rank ", rank,
                       "; a group of ", size, " ranks has ranks 0..", size - 1, ", and a rank cannot be its own peer");
}

void check_allgather_pair(const at::Tensor& output, const at::Tensor& input, int size, const char* op) {
    (void)check_movable(input, op, "input");
    check_dense(output, op, "output");
    check_same_dtype(input, output, op);
    CCL_CHECK_ARGUMENT(output.numel() == input.numel() * size, op,
                       ": output tensor size must be equal to world_size times input tensor size (output has ",
                       output.numel(), " elements, input ", input.numel(), ", world_size ", size, ")");
}

Reduction check_reduce_scatter_pair(const at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& rop,
                                    int size, const char* op) {
    check_dense(input, op, "input");
    check_dense(output, op, "output");
    check_same_dtype(input, output, op);
    Reduction plan = check_reducible(input, rop, op);
    check_same_numel(input, output.numel() * size, op, "input", "output's numel x group size");
    return plan;
}

std::vector<std::size_t> check_split_counts(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                                            const char* op, const char* which) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t row = rows == 0 ? 0 : t.numel() / rows;
    const int64_t scale = t.is_complex() ? 2 : 1;
    std::vector<std::size_t> counts(static_cast<std::size_t>(size));
    if (splits.empty()) {
        CCL_CHECK_ARGUMENT(rows % size == 0, op, ": ", which, "'s first dimension (", rows,
                           ") is not divisible by the group size ", size, "; pass split sizes");
        std::fill(counts.begin(), counts.end(), static_cast<std::size_t>(rows / size * row * scale));
        return counts;
    }
    CCL_CHECK_ARGUMENT(static_cast<int64_t>(splits.size()) == size, op, ": ", which, " split sizes have ", splits.size(),
                       " entries, expected one per rank (", size, ")");
    for (auto s : splits) CCL_CHECK_ARGUMENT(s >= 0, op, ": negative ", which, " split size ", s);
    const int64_t total = std::accumulate(splits.begin(), splits.end(), int64_t{0});
    CCL_CHECK_ARGUMENT(total == rows, op, ": ", which, " split sizes add up to ", total, ", but its first dimension is ",
                       rows);
    for (int r = 0; r < size; ++r) counts[r] = static_cast<std::size_t>(splits[r] * row * scale);
    return counts;
}

}  // namespace ccl_torch
