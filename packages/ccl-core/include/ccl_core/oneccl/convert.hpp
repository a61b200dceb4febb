// The one place that includes oneCCL's header and converts our enums to its enums. Under ccl_core/oneccl/ because
// only packages built against oneCCL itself (ccl-core, ccl-xpu) may include it; the other headers never do.
#pragma once

#include <ccl_core/types.hpp>

#include <oneapi/ccl.hpp>

namespace ccl_core::detail {

inline ccl::datatype to_ccl(DType dtype) {
    switch (dtype) {
        case DType::int8: return ccl::datatype::int8;
        case DType::uint8: return ccl::datatype::uint8;
        case DType::int16: return ccl::datatype::int16;
        case DType::uint16: return ccl::datatype::uint16;
        case DType::int32: return ccl::datatype::int32;
        case DType::uint32: return ccl::datatype::uint32;
        case DType::int64: return ccl::datatype::int64;
        case DType::uint64: return ccl::datatype::uint64;
        case DType::float16: return ccl::datatype::float16;
        case DType::bfloat16: return ccl::datatype::bfloat16;
        case DType::float32: return ccl::datatype::float32;
        case DType::float64: return ccl::datatype::float64;
    }
    return ccl::datatype::int8;  // unreachable: the switch covers every DType
}

inline ccl::reduction to_ccl(ReduceOp op) {
    switch (op) {
        case ReduceOp::sum: return ccl::reduction::sum;
        case ReduceOp::prod: return ccl::reduction::prod;
        case ReduceOp::min: return ccl::reduction::min;
        case ReduceOp::max: return ccl::reduction::max;
        case ReduceOp::avg: return ccl::reduction::avg;
    }
    return ccl::reduction::sum;  // unreachable
}

}  // namespace ccl_core::detail
