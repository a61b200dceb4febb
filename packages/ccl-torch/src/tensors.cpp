#include "tensors.hpp"

#include "torch_errors.hpp"

#include <c10/util/Exception.h>

#include <sstream>

namespace ccl_torch {

std::string describe(const at::Tensor& t) {
    std::ostringstream s;
    s << c10::toString(t.scalar_type()) << t.sizes();
    return s.str();
}

ccl_core::DType core_dtype(at::ScalarType type, const char* op) {
    using ccl_core::DType;
    switch (type) {
        case at::kFloat: case at::kComplexFloat: return DType::float32;
        case at::kDouble: case at::kComplexDouble: return DType::float64;
        case at::kHalf: return DType::float16;
        case at::kBFloat16: return DType::bfloat16;
        case at::kChar: return DType::int8;
        case at::kShort: return DType::int16;
        case at::kInt: return DType::int32;
        case at::kLong: return DType::int64;
        case at::kByte: case at::kBool: return DType::uint8;
        case at::kUInt16: return DType::uint16;
        case at::kUInt32: return DType::uint32;
        case at::kUInt64: return DType::uint64;
        default:
            CCL_CHECK_DTYPE(false, op, ": dtype ", type, " is not supported by the ccl backend "
                             "(supported: float64/32/16, bfloat16, int8/16/32/64, uint8/16/32/64, bool, complex64/128)");
    }
}

Buffer buffer_of(const at::Tensor& contiguous, const char* op) {
    const bool complex = contiguous.is_complex();
    Buffer b{contiguous, core_dtype(contiguous.scalar_type(), op),
             static_cast<std::size_t>(contiguous.numel()) * (complex ? 2 : 1)};
    return b;
}

Buffer input_buffer(const at::Tensor& t, const char* op) {
    return buffer_of(t.contiguous(), op);
}

void split_into(const at::Tensor& flat, std::vector<at::Tensor>& outs, int64_t n) {
    for (std::size_t r = 0; r < outs.size(); ++r) outs[r].copy_(flat.narrow(0, r * n, n).view(outs[r].sizes()));
}

Buffer output_buffer(at::Tensor& t, const char* op, FinishSteps& finish) {
    if (t.is_contiguous()) return buffer_of(t, op);
    at::Tensor staged = t.contiguous();  // keeps the current values: in-place ops read them
    finish.push_back([staged, t]() mutable { t.copy_(staged); });
    return buffer_of(staged, op);
}

}  // namespace ccl_torch
