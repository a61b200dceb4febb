#include <ccl_core/errors.hpp>
#include <ccl_core/types.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

namespace ccl_core {
namespace {

struct DTypeInfo {
    DType dtype;
    const char* name;
    std::size_t size;
    bool floating;
};

constexpr std::array<DTypeInfo, 12> kDTypes{{
    {DType::int8, "int8", 1, false},
    {DType::uint8, "uint8", 1, false},
    {DType::int16, "int16", 2, false},
    {DType::uint16, "uint16", 2, false},
    {DType::int32, "int32", 4, false},
    {DType::uint32, "uint32", 4, false},
    {DType::int64, "int64", 8, false},
    {DType::uint64, "uint64", 8, false},
    {DType::float16, "float16", 2, true},
    {DType::bfloat16, "bfloat16", 2, true},
    {DType::float32, "float32", 4, true},
    {DType::float64, "float64", 8, true},
}};

constexpr std::array<std::pair<ReduceOp, const char*>, 5> kOps{{
    {ReduceOp::sum, "sum"},
    {ReduceOp::prod, "prod"},
    {ReduceOp::min, "min"},
    {ReduceOp::max, "max"},
    {ReduceOp::avg, "avg"},
}};

const DTypeInfo& info(DType dtype) {
    return kDTypes.at(static_cast<std::size_t>(dtype));
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

}  // namespace

std::size_t dtype_size(DType dtype) { return info(dtype).size; }
const char* dtype_name(DType dtype) { return info(dtype).name; }
bool is_floating(DType dtype) { return info(dtype).floating; }

const char* reduce_op_name(ReduceOp op) {
    return kOps.at(static_cast<std::size_t>(op)).second;
}

DType parse_dtype(const std::string& name) {
    std::string key = lower(name);
    if (key == "half" || key == "fp16") key = "float16";
    if (key == "bf16") key = "bfloat16";
    if (key == "float" || key == "fp32") key = "float32";
    if (key == "double" || key == "fp64") key = "float64";
    std::string accepted;
    for (const auto& d : kDTypes) {
        if (key == d.name) return d.dtype;
        accepted += accepted.empty() ? d.name : std::string(", ") + d.name;
    }
    throw InvalidArgument("unknown dtype '" + name + "'; expected one of: " + accepted);
}

ReduceOp parse_reduce_op(const std::string& name) {
    std::string key = lower(name);
    if (key == "product") key = "prod";
    if (key == "average") key = "avg";
    for (const auto& [op, op_name] : kOps) {
        if (key == op_name) return op;
    }
    throw InvalidArgument("unknown reduce op '" + name + "'; expected one of: sum, prod, min, max, avg");
}

const char* abort_cause_name(AbortCause cause) {
    switch (cause) {
        case AbortCause::none: return "none";
        case AbortCause::timeout: return "timeout";
        case AbortCause::peer_died: return "peer_died";
        case AbortCause::failed: return "failed";
        case AbortCause::by_user: return "by_user";
    }
    return "none";
}

}  // namespace ccl_core
