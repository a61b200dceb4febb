// Element types and reduce operations, independent of oneCCL's headers so that users of ccl-core
// (ccl-torch, ccl-xpu) do not need oneCCL's include directory.
#pragma once

#include <cstddef>
#include <string>

namespace ccl_core {

enum class DType {
    int8,
    uint8,
    int16,
    uint16,
    int32,
    uint32,
    int64,
    uint64,
    float16,
    bfloat16,
    float32,
    float64,
};

enum class ReduceOp {
    sum,
    prod,
    min,
    max,
    avg,
};

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
const char* reduce_op_name(ReduceOp op);
bool is_floating(DType dtype);

// Parse "float32", "bf16", "sum", ...; throws InvalidArgument listing the accepted names.
DType parse_dtype(const std::string& name);
ReduceOp parse_reduce_op(const std::string& name);

}  // namespace ccl_core
