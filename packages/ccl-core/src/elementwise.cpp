#include "elementwise.hpp"

#include <ccl_core/errors.hpp>

#include <cstdint>
#include <cstring>

namespace ccl_core::detail {
namespace {

// bfloat16 is the upper half of a float32; round to nearest even when narrowing.
float bf16_to_float(std::uint16_t v) {
    std::uint32_t bits = static_cast<std::uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

std::uint16_t float_to_bf16(float f) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<std::uint16_t>(bits >> 16);
}

template <class T>
void divide(T* p, std::size_t n, double d) {
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / d);
}

}  // namespace

void divide_in_place(void* buffer, std::size_t count, DType dtype, double divisor) {
    switch (dtype) {
        case DType::float32: return divide(static_cast<float*>(buffer), count, divisor);
        case DType::float64: return divide(static_cast<double*>(buffer), count, divisor);
        case DType::float16: {
            auto* p = static_cast<_Float16*>(buffer);  // GCC >= 12 / Clang >= 15 on x86-64
            const float d = static_cast<float>(divisor);
            for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<_Float16>(static_cast<float>(p[i]) / d);
            return;
        }
        case DType::bfloat16: {
            auto* p = static_cast<std::uint16_t*>(buffer);
            const float d = static_cast<float>(divisor);
            for (std::size_t i = 0; i < count; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / d);
            return;
        }
        default:
            throw Unsupported(std::string("division of ") + dtype_name(dtype) + " buffers is not supported");
    }
}

}  // namespace ccl_core::detail
