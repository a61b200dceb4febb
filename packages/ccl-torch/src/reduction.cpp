#include "reduction.hpp"

#include "torch_errors.hpp"

namespace ccl_torch {

Reduction plan_reduction(const c10d::ReduceOp& op, const at::Tensor& t, const char* name) {
    const at::ScalarType type = t.scalar_type();
    using R = c10d::ReduceOp;
    using ccl_core::ReduceOp;
    const bool complex = at::isComplexType(type);
    const bool floating = at::isFloatingType(type) || complex;
    const bool is_bool = type == at::kBool;
    const bool integral = at::isIntegralType(type, /*includeBool=*/true);
    Reduction r{ReduceKind::collective, ReduceOp::sum, op.op_};
    switch (op.op_) {
        case R::SUM:
            r.core_op = is_bool ? ReduceOp::max : ReduceOp::sum;  // bool: logical or, as gloo does
            return r;
        case R::AVG:
            TORCH_CHECK_NOT_IMPLEMENTED(floating, name, ": ReduceOp.AVG needs a floating or complex dtype, got ", type);
            r.core_op = t.device().is_cpu() ? ReduceOp::avg : ReduceOp::sum;
            r.divide_by_size = !t.device().is_cpu();
            return r;
        case R::PREMUL_SUM: {
            TORCH_CHECK_NOT_IMPLEMENTED(floating, name, ": ReduceOp.PREMUL_SUM needs a floating or complex dtype, got ", type);
#if CCL_TORCH_MINOR >= 13
            auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
#else  // the same factor under its older name
            auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
#endif
            CCL_CHECK_ARGUMENT(s != nullptr, name, ": PREMUL_SUM without a factor");
            if (s->tensor_factor.defined()) r.premul_tensor = s->tensor_factor;
            else r.premul = s->double_factor;
            r.core_op = ReduceOp::sum;
            return r;
        }
        case R::PRODUCT:
        case R::MIN:
        case R::MAX:
            TORCH_CHECK_NOT_IMPLEMENTED(!complex, name, ": ReduceOp.", op.op_ == R::PRODUCT ? "PRODUCT" : op.op_ == R::MIN ? "MIN" : "MAX",
                                        " is not defined for complex dtype ", type, " (SUM, AVG and PREMUL_SUM are)");
            if (is_bool) {  // logical and / or
                r.core_op = op.op_ == R::MAX ? ReduceOp::max : ReduceOp::min;
                return r;
            }
            r.core_op = op.op_ == R::PRODUCT ? ReduceOp::prod : op.op_ == R::MIN ? ReduceOp::min : ReduceOp::max;
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
