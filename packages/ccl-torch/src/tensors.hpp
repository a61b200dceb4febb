// How torch tensors become ccl-core buffers: checks with messages that name the op and the tensor,
// dtype mapping (bool as uint8, complex as pairs of reals), and staging of non-contiguous outputs.
#pragma once

#include <ccl_core/types.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <functional>
#include <string>
#include <vector>

namespace ccl_torch {

// Steps run once an operation completed (copy staged results back, local reductions, ...).
using FinishSteps = std::vector<std::function<void()>>;

// A tensor as oneCCL sees it: contiguous memory, a ccl-core dtype, a count of elements of that dtype.
struct Buffer {
    at::Tensor tensor;  // the memory oneCCL reads/writes (may be a staging copy)
    ccl_core::DType dtype;
    std::size_t count;
    void* data() const { return tensor.data_ptr(); }
};

// Throws ValueError naming `op` unless `t` is a defined dense tensor (its device is checked when the op picks
// the collectives for it: ProcessGroupCCL::engine_for).
void check_dense(const at::Tensor& t, const char* op, const char* what);
void check_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* op);
void check_same_numel(const at::Tensor& t, int64_t expected, const char* op, const char* what, const char* why);

// Buffer for reading only (a contiguous copy if needed).
Buffer input_buffer(const at::Tensor& t, const char* op);
// Buffer that will be written: `t` itself when contiguous, else a staging copy that `finish` copies back.
Buffer output_buffer(at::Tensor& t, const char* op, FinishSteps& finish);

ccl_core::DType core_dtype(at::ScalarType type, const char* op);

// The reduction oneCCL runs for `op` on tensors of `type`, after any preparation; throws NotImplementedError
// for combinations that make no sense (MIN on complex, AVG on integers, bitwise on floats).
enum class ReduceKind { engine, bitwise };
struct Reduction {
    ReduceKind kind;
    ccl_core::ReduceOp engine_op;      // for kind == engine
    c10d::ReduceOp::RedOpType torch_op;
    double premul = 1.0;               // PREMUL_SUM with a scalar
    at::Tensor premul_tensor;          // PREMUL_SUM with a tensor
};
Reduction plan_reduction(const c10d::ReduceOp& op, at::ScalarType type, const char* name);
// Multiply by the PREMUL_SUM factor (no-op otherwise).
void apply_premul(const Reduction& r, at::Tensor& t);
// result = reduce(gathered[0], gathered[1], ...) for BAND/BOR/BXOR.
void bitwise_reduce(const Reduction& r, const at::Tensor& gathered /* [size, ...] */, at::Tensor& result);

std::string describe(const at::Tensor& t);  // "float32[2, 3]"

}  // namespace ccl_torch
