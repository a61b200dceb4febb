// How torch tensors become ccl-core buffers: dtype mapping (bool as uint8, complex as pairs of reals), and staging
// of non-contiguous outputs.
#pragma once

#include <ccl_core/types.hpp>

#include <ATen/ATen.h>

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

// `contiguous` itself as a buffer (complex counted as pairs of reals).
Buffer buffer_of(const at::Tensor& contiguous, const char* op);
// Buffer for reading only (a contiguous copy if needed).
Buffer input_buffer(const at::Tensor& t, const char* op);
// Buffer that will be written: `t` itself when contiguous, else a staging copy that `finish` copies back.
Buffer output_buffer(at::Tensor& t, const char* op, FinishSteps& finish);

ccl_core::DType core_dtype(at::ScalarType type, const char* op);

// outs[r] = flat[r * n, (r + 1) * n), reshaped: the last step of every gather into a list of tensors.
void split_into(const at::Tensor& flat, std::vector<at::Tensor>& outs, int64_t n);

std::string describe(const at::Tensor& t);  // "float32[2, 3]"

}  // namespace ccl_torch
