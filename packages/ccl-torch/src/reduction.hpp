// How a torch reduce op runs on ccl-core: planned once, in the op's check, and applied by its issue.
#pragma once

#include <ccl_core/types.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace ccl_torch {

enum class ReduceKind {
    collective,  // ccl-core reduces (core_op)
    bitwise,     // BAND/BOR/BXOR: oneCCL has none; gather every rank's tensor, then reduce locally
};

struct Reduction {
    ReduceKind kind;
    ccl_core::ReduceOp core_op;       // for kind == collective
    c10d::ReduceOp::RedOpType torch_op;
    double premul = 1.0;              // PREMUL_SUM with a scalar
    at::Tensor premul_tensor;         // PREMUL_SUM with a tensor
    // AVG on a device tensor: ccl-core divides host memory itself (core_op avg); on a device the plan sums and the
    // result is divided by the group size with a torch op, on the device's stream, where the result lands.
    bool divide_by_size = false;
};

// The plan for `op` on `t`'s dtype and device; throws NotImplementedError for combinations that make no sense (MIN on
// complex, AVG on integers, bitwise on floats).
Reduction plan_reduction(const c10d::ReduceOp& op, const at::Tensor& t, const char* name);
// Multiply by the PREMUL_SUM factor (no-op otherwise).
void apply_premul(const Reduction& r, at::Tensor& t);
// result = reduce(gathered[0], gathered[1], ...) for BAND/BOR/BXOR.
void bitwise_reduce(const Reduction& r, const at::Tensor& gathered /* [size, ...] */, at::Tensor& result);

}  // namespace ccl_torch
