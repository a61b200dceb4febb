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

namespace {

Buffer make_buffer(const at::Tensor& contiguous, const char* op) {
    const bool complex = contiguous.is_complex();
    Buffer b{contiguous, core_dtype(contiguous.scalar_type(), op),
             static_cast<std::size_t>(contiguous.numel()) * (complex ? 2 : 1)};
    return b;
}

}  // namespace

Buffer input_buffer(const at::Tensor& t, const char* op) {
    return make_buffer(t.contiguous(), op);
}

Buffer output_buffer(at::Tensor& t, const char* op, FinishSteps& finish) {
    if (t.is_contiguous()) return make_buffer(t, op);
    at::Tensor staged = t.contiguous();  // keeps the current values: in-place ops read them
    finish.push_back([staged, t]() mutable { t.copy_(staged); });
    return make_buffer(staged, op);
}

Reduction plan_reduction(const c10d::ReduceOp& op, at::ScalarType type, const char* name) {
    using R = c10d::ReduceOp;
    using ccl_core::ReduceOp;
    const bool complex = at::isComplexType(type);
    const bool floating = at::isFloatingType(type) || complex;
    const bool is_bool = type == at::kBool;
    const bool integral = at::isIntegralType(type, /*includeBool=*/true);
    Reduction r{ReduceKind::engine, ReduceOp::sum, op.op_};
    switch (op.op_) {
        case R::SUM:
            r.engine_op = is_bool ? ReduceOp::max : ReduceOp::sum;  // bool: logical or, as gloo does
            return r;
        case R::AVG:
            TORCH_CHECK_NOT_IMPLEMENTED(floating, name, ": ReduceOp.AVG needs a floating or complex dtype, got ", type);
            r.engine_op = ReduceOp::avg;
            return r;
        case R::PREMUL_SUM: {
            TORCH_CHECK_NOT_IMPLEMENTED(floating, name, ": ReduceOp.PREMUL_SUM needs a floating or complex dtype, got ", type);
            auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
            CCL_CHECK_ARGUMENT(s != nullptr, name, ": PREMUL_SUM without a factor");
            if (s->tensor_factor.defined()) r.premul_tensor = s->tensor_factor;
            else r.premul = s->double_factor;
            r.engine_op = ReduceOp::sum;
            return r;
        }
        case R::PRODUCT:
        case R::MIN:
        case R::MAX:
            TORCH_CHECK_NOT_IMPLEMENTED(!complex, name, ": ReduceOp.", op.op_ == R::PRODUCT ? "PRODUCT" : op.op_ == R::MIN ? "MIN" : "MAX",
                                        " is not defined for complex dtype ", type, " (SUM, AVG and PREMUL_SUM are)");
            if (is_bool) {  // logical and / or
                r.engine_op = op.op_ == R::MAX ? ReduceOp::max : ReduceOp::min;
                return r;
            }
            r.engine_op = op.op_ == R::PRODUCT ? ReduceOp::prod : op.op_ == R::MIN ? ReduceOp::min : ReduceOp::max;
            return r;
        case R::BAND:
        case R::BOR:
        case R::BXOR:
            TORCH_CHECK_NOT_IMPLEMENTED(integral, name, ": bitwise reduce ops need an integer or bool dtype, got ", type);
            r.kind = ReduceKind::bitwise;  // oneCCL has no bitwise reductions: gather, then reduce locally
            return r;
        default:
            TORCH_CHECK_NOT_IMPLEMENTED(false, name, ": reduce op ", static_cast<int>(op.op_), " is not supported");
    }
}

void apply_premul(const Reduction& r, at::Tensor& t) {
    if (r.torch_op != c10d::ReduceOp::PREMUL_SUM) return;
    if (r.premul_tensor.defined()) t.mul_(r.premul_tensor.to(t.device()));
    else t.mul_(r.premul);
}

void bitwise_reduce(const Reduction& r, const at::Tensor& gathered, at::Tensor& result) {
    at::Tensor acc = gathered[0].clone();
    for (int64_t i = 1; i < gathered.size(0); ++i) {
        switch (r.torch_op) {
            case c10d::ReduceOp::BAND: acc.bitwise_and_(gathered[i]); break;
            case c10d::ReduceOp::BOR: acc.bitwise_or_(gathered[i]); break;
            default: acc.bitwise_xor_(gathered[i]); break;
        }
    }
    result.copy_(acc.view(result.sizes()));
}

}  // namespace ccl_torch
