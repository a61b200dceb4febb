#include "elementwise.hpp"

#include <ccl_core/errors.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

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

// Element type <-> accumulator type.
struct Bf16 { std::uint16_t bits; };
template <class T> struct Acc { using type = T; };
template <> struct Acc<_Float16> { using type = float; };
template <> struct Acc<Bf16> { using type = float; };
template <class T> typename Acc<T>::type widen(T v) { return static_cast<typename Acc<T>::type>(v); }
float widen(Bf16 v) { return bf16_to_float(v.bits); }
template <class T> T narrow(typename Acc<T>::type v) { return static_cast<T>(v); }
template <> Bf16 narrow<Bf16>(float v) { return Bf16{float_to_bf16(v)}; }

// Integer sum and product wrap (computed unsigned: signed overflow would be undefined behaviour).
template <class A> A add(A a, A b) {
    if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
    else return a + b;
}
template <class A> A mul(A a, A b) {
    if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
    else return a * b;
}

// Works through the buffers in blocks that stay in L1: accumulate every source in order into a local block, then
// write the block out. The local block is what makes aliasing between sources and destinations harmless.
template <class T, class F>
void reduce_typed(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count, F f) {
    using A = typename Acc<T>::type;
    constexpr std::size_t kBlock = 2048;
    A acc[kBlock];
    for (std::size_t base = 0; base < count; base += kBlock) {
        const std::size_t n = std::min(kBlock, count - base);
        const T* first = static_cast<const T*>(srcs[0]) + base;
        for (std::size_t i = 0; i < n; ++i) acc[i] = widen(first[i]);
        for (int k = 1; k < nsrcs; ++k) {
            const T* src = static_cast<const T*>(srcs[k]) + base;
            for (std::size_t i = 0; i < n; ++i) acc[i] = f(acc[i], widen(src[i]));
        }
        for (void* out : {dst, dst2}) {
            if (!out) continue;
            T* o = static_cast<T*>(out) + base;
            for (std::size_t i = 0; i < n; ++i) o[i] = narrow<T>(acc[i]);
        }
    }
}

template <class T>
void reduce_as(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count, ReduceOp op) {
    using A = typename Acc<T>::type;
    switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg: return reduce_typed<T>(srcs, nsrcs, dst, dst2, count, [](A a, A b) { return add(a, b); });
        case ReduceOp::prod: return reduce_typed<T>(srcs, nsrcs, dst, dst2, count, [](A a, A b) { return mul(a, b); });
        // NaN wins, as in torch's min/max: `b != b` is true only for a NaN (and never for integers), and a NaN
        // already in `a` stays because no comparison with it is true
        case ReduceOp::min:
            return reduce_typed<T>(srcs, nsrcs, dst, dst2, count, [](A a, A b) { return (b < a || b != b) ? b : a; });
        case ReduceOp::max:
            return reduce_typed<T>(srcs, nsrcs, dst, dst2, count, [](A a, A b) { return (a < b || b != b) ? b : a; });
    }
}

}  // namespace

void reduce_sources(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count, DType dtype,
                    ReduceOp op) {
    switch (dtype) {
        case DType::int8: return reduce_as<std::int8_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::uint8: return reduce_as<std::uint8_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::int16: return reduce_as<std::int16_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::uint16: return reduce_as<std::uint16_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::int32: return reduce_as<std::int32_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::uint32: return reduce_as<std::uint32_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::int64: return reduce_as<std::int64_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::uint64: return reduce_as<std::uint64_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::float16: return reduce_as<_Float16>(srcs, nsrcs, dst, dst2, count, op);
        case DType::bfloat16: return reduce_as<Bf16>(srcs, nsrcs, dst, dst2, count, op);
        case DType::float32: return reduce_as<float>(srcs, nsrcs, dst, dst2, count, op);
        case DType::float64: return reduce_as<double>(srcs, nsrcs, dst, dst2, count, op);
    }
}

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
