// Reduction and division kernels, built once per level (meson.build passes CCL_CORE_KERNEL_LEVEL and the level's
// -m flags). Plain loops that GCC vectorises for the level; intrinsics only for the 16-bit float conversions:
// GCC does not vectorise _Float16 casts below AVX512-FP16, and its vectorised bfloat16 rounding is slower than the
// loops below (docs/performance.md, "Kernels").
//
// Rules that keep the levels interchangeable:
// - every level gives the same bits: sources are combined in rank order, float16/bfloat16 accumulate in float32
//   and round once (to nearest even), and -ffp-contract=off forbids fused multiply-adds;
// - bfloat16 rounds with integer arithmetic, not AVX512-BF16's VCVTNEPS2BF16, which flushes denormals to zero;
// - only builtins and intrinsics here, everything in an unnamed namespace: an inline library function compiled
//   for AVX-512 could otherwise be shared with, and run by, the baseline code on a CPU without it.
#include "kernels.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#ifndef CCL_CORE_KERNEL_LEVEL
#error "build reduce_kernels.cpp with -DCCL_CORE_KERNEL_LEVEL=<level>"
#endif
#define CCL_CORE_CONCAT2(a, b) a##b
#define CCL_CORE_CONCAT(a, b) CCL_CORE_CONCAT2(a, b)
#define CCL_CORE_STRING2(a) #a
#define CCL_CORE_STRING(a) CCL_CORE_STRING2(a)

namespace ccl_core::detail {
namespace {

// Elements per block: the float32 accumulator of a block (8 KiB) stays in L1 while every source streams through.
constexpr std::size_t kBlock = 2048;

std::size_t least(std::size_t a, std::size_t b) { return a < b ? a : b; }

// 16-bit floating formats travel as their bits; Half and Bf16 only tell the templates which one.
struct Half { std::uint16_t bits; };
struct Bf16 { std::uint16_t bits; };

// ---- 16-bit floats <-> float32, one element and one vector at a time -----------------------------------------
// bfloat16 is the upper half of a float32, rounded to nearest even with integer arithmetic (a quiet NaN stays one).

float to_float(Half h) {
#if defined(__F16C__)
    return _cvtsh_ss(h.bits);
#else
    return static_cast<float>(__builtin_bit_cast(_Float16, h.bits));
#endif
}

float to_float(Bf16 b) { return __builtin_bit_cast(float, static_cast<std::uint32_t>(b.bits) << 16); }
float to_float(float f) { return f; }

template <class T> T from_float(float f);
template <> float from_float<float>(float f) { return f; }

template <> Half from_float<Half>(float f) {
#if defined(__F16C__)
    return Half{static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))};
#else
    return Half{__builtin_bit_cast(std::uint16_t, static_cast<_Float16>(f))};
#endif
}

template <> Bf16 from_float<Bf16>(float f) {
    const std::uint32_t bits = __builtin_bit_cast(std::uint32_t, f);
    const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const std::uint32_t quiet_nan = (bits >> 16) | 0x40u;
    return Bf16{static_cast<std::uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}

// Vectors of float32 lanes: AVX-512 16, AVX2 8; the baseline has none and runs the scalar loops only.
#if defined(__AVX512F__)
#define CCL_CORE_VECTORS 1
constexpr std::size_t kLanes = 16;
using Floats = __m512;
Floats load(const float* p) { return _mm512_loadu_ps(p); }
void store(float* p, Floats v) { _mm512_storeu_ps(p, v); }
Floats load(const Half* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
void store(Half* p, Floats v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
Floats load(const Bf16* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
void store(Bf16* p, Floats v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i high = _mm512_srli_epi32(bits, 16);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), _mm512_and_si512(high, _mm512_set1_epi32(1))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i out = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(out));
}
Floats load_floats(const float* p) { return _mm512_load_ps(p); }
void store_floats(float* p, Floats v) { _mm512_store_ps(p, v); }
Floats add(Floats a, Floats b) { return _mm512_add_ps(a, b); }
Floats mul(Floats a, Floats b) { return _mm512_mul_ps(a, b); }
// b where `take` holds, else a; take = (b < a) or b is NaN, for min (a < b or b is NaN for max)
Floats min_keeping_nan(Floats a, Floats b) {
    const __mmask16 take = _mm512_cmp_ps_mask(b, a, _CMP_LT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(take, a, b);
}
Floats max_keeping_nan(Floats a, Floats b) {
    const __mmask16 take = _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(take, a, b);
}
#elif defined(__AVX2__) && defined(__F16C__)
#define CCL_CORE_VECTORS 1
constexpr std::size_t kLanes = 8;
using Floats = __m256;
Floats load(const float* p) { return _mm256_loadu_ps(p); }
void store(float* p, Floats v) { _mm256_storeu_ps(p, v); }
Floats load(const Half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
void store(Half* p, Floats v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
Floats load(const Bf16* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
void store(Bf16* p, Floats v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i high = _mm256_srli_epi32(bits, 16);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), _mm256_and_si256(high, _mm256_set1_epi32(1))), 16);
    // |bits| > infinity as signed integers: both sides are non-negative
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i out = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, _mm256_set1_epi32(0x40)), nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm_packus_epi32(_mm256_castsi256_si128(out), _mm256_extracti128_si256(out, 1)));
}
Floats load_floats(const float* p) { return _mm256_load_ps(p); }
void store_floats(float* p, Floats v) { _mm256_store_ps(p, v); }
Floats add(Floats a, Floats b) { return _mm256_add_ps(a, b); }
Floats mul(Floats a, Floats b) { return _mm256_mul_ps(a, b); }
Floats min_keeping_nan(Floats a, Floats b) {
    return _mm256_blendv_ps(a, b, _mm256_or_ps(_mm256_cmp_ps(b, a, _CMP_LT_OQ), _mm256_cmp_ps(b, b, _CMP_UNORD_Q)));
}
Floats max_keeping_nan(Floats a, Floats b) {
    return _mm256_blendv_ps(a, b, _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_LT_OQ), _mm256_cmp_ps(b, b, _CMP_UNORD_Q)));
}
#else
constexpr std::size_t kLanes = 0;
#endif

// ---- the operations -----------------------------------------------------------------------------------------

// Integers wrap like two's complement: computed unsigned, and at least as wide as unsigned int, because narrower
// types promote to (signed) int, where 65535 * 65535 would overflow.
template <class A>
using Wrapping = std::conditional_t<(sizeof(A) < sizeof(unsigned)), unsigned, std::make_unsigned_t<A>>;

// Each op on scalars and, where the level has them, on vectors of float32 (the same result lane by lane).
struct Sum {
    template <class A> static A apply(A a, A b) {
        if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<Wrapping<A>>(a) + static_cast<Wrapping<A>>(b));
        else return a + b;
    }
#if defined(CCL_CORE_VECTORS)
    static Floats apply(Floats a, Floats b) { return add(a, b); }
#endif
};
struct Prod {
    template <class A> static A apply(A a, A b) {
        if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<Wrapping<A>>(a) * static_cast<Wrapping<A>>(b));
        else return a * b;
    }
#if defined(CCL_CORE_VECTORS)
    static Floats apply(Floats a, Floats b) { return mul(a, b); }
#endif
};
// NaN wins, as in torch's min/max: `b != b` holds only for a NaN (never for integers), and a NaN already in `a`
// stays because no comparison with it is true.
struct Min {
    template <class A> static A apply(A a, A b) { return (b < a || b != b) ? b : a; }
#if defined(CCL_CORE_VECTORS)
    static Floats apply(Floats a, Floats b) { return min_keeping_nan(a, b); }
#endif
};
struct Max {
    template <class A> static A apply(A a, A b) { return (a < b || b != b) ? b : a; }
#if defined(CCL_CORE_VECTORS)
    static Floats apply(Floats a, Floats b) { return max_keeping_nan(a, b); }
#endif
};

// The type a block accumulates in: float32 for the 16-bit floats, the element type itself otherwise.
template <class T>
using Accumulator = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, Bf16>, float, T>;
template <class T> Accumulator<T> widen(T v) {
    if constexpr (std::is_same_v<Accumulator<T>, T>) return v;
    else return to_float(v);
}
template <class T> T narrow(Accumulator<T> v) {
    if constexpr (std::is_same_v<Accumulator<T>, T>) return v;
    else return from_float<T>(v);
}

// Block by block in plain loops: the first source into a local accumulator, every further source combined into it,
// the block written out. The local block makes aliasing between sources and destinations harmless, and lets GCC
// vectorise without alias checks. Integers and float64 at every level, and every type at the baseline (whose
// bfloat16 conversions GCC vectorises with SSE2; its float16 stays scalar).
template <class T, class Op>
void reduce_blocks(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count) {
    alignas(64) Accumulator<T> acc[kBlock];
    for (std::size_t base = 0; base < count; base += kBlock) {
        const std::size_t n = least(kBlock, count - base);
        const T* first = static_cast<const T*>(srcs[0]) + base;
        for (std::size_t i = 0; i < n; ++i) acc[i] = widen(first[i]);
        for (int k = 1; k < nsrcs; ++k) {
            const T* src = static_cast<const T*>(srcs[k]) + base;
            for (std::size_t i = 0; i < n; ++i) acc[i] = Op::apply(acc[i], widen(src[i]));
        }
        for (void* out : {dst, dst2}) {
            if (!out) continue;
            T* o = static_cast<T*>(out) + base;
            for (std::size_t i = 0; i < n; ++i) o[i] = narrow<T>(acc[i]);
        }
    }
}

// float32, float16 and bfloat16 in vectors of float32 lanes (levels with vectors): the conversions are fused into
// the passes, so nothing makes an extra trip through memory. Two sources (the common case) take one pass: load
// both, combine, round, store; 1.7x faster than reduce_blocks' three passes for float32 at 32 MiB. More sources
// combine into a float32 accumulator per block first. Outputs may equal a source: each vector is read before
// either output is written, and both outputs are written in the same pass.
#if defined(CCL_CORE_VECTORS)
template <class T, class Op>
void reduce_lanes(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count) {
    const auto source = [&](int k) { return static_cast<const T*>(srcs[k]); };
    T* out = static_cast<T*>(dst ? dst : dst2);
    T* out2 = dst ? static_cast<T*>(dst2) : nullptr;
    if (!out) return;
    if (nsrcs == 1) {
        for (std::size_t i = 0; i < count; ++i) {
            const T v = source(0)[i];
            out[i] = v;
            if (out2) out2[i] = v;
        }
        return;
    }
    alignas(64) float acc[kBlock];
    const bool two = nsrcs == 2;
    const int last = nsrcs - 1;
    for (std::size_t base = 0; base < count; base += kBlock) {
        const std::size_t n = least(kBlock, count - base);
        const T* first = source(0) + base;
        if (!two) {  // acc = srcs[0] op ... op srcs[last - 1]
            std::size_t i = 0;
            for (; i + kLanes <= n; i += kLanes) store_floats(acc + i, load(first + i));
            for (; i < n; ++i) acc[i] = to_float(first[i]);
            for (int k = 1; k < last; ++k) {
                const T* s = source(k) + base;
                i = 0;
                for (; i + kLanes <= n; i += kLanes) store_floats(acc + i, Op::apply(load_floats(acc + i), load(s + i)));
                for (; i < n; ++i) acc[i] = Op::apply(acc[i], to_float(s[i]));
            }
        }
        // outputs = round((two ? srcs[0] : acc) op srcs[last])
        const T* s = source(last) + base;
        T* o = out + base;
        T* o2 = out2 ? out2 + base : nullptr;
        std::size_t i = 0;
        for (; i + kLanes <= n; i += kLanes) {
            const Floats r = Op::apply(two ? load(first + i) : load_floats(acc + i), load(s + i));
            store(o + i, r);
            if (o2) store(o2 + i, r);
        }
        for (; i < n; ++i) {
            const T r = from_float<T>(Op::apply(two ? to_float(first[i]) : acc[i], to_float(s[i])));
            o[i] = r;
            if (o2) o2[i] = r;
        }
    }
}
#endif

template <class T, class Op>
void reduce_typed(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count) {
#if defined(CCL_CORE_VECTORS)
    if constexpr (std::is_same_v<Accumulator<T>, float>) return reduce_lanes<T, Op>(srcs, nsrcs, dst, dst2, count);
#endif
    reduce_blocks<T, Op>(srcs, nsrcs, dst, dst2, count);
}

template <class T>
void reduce_as(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count, ReduceOp op) {
    switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg: return reduce_typed<T, Sum>(srcs, nsrcs, dst, dst2, count);
        case ReduceOp::prod: return reduce_typed<T, Prod>(srcs, nsrcs, dst, dst2, count);
        case ReduceOp::min: return reduce_typed<T, Min>(srcs, nsrcs, dst, dst2, count);
        case ReduceOp::max: return reduce_typed<T, Max>(srcs, nsrcs, dst, dst2, count);
    }
}

void reduce(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count, DType dtype, ReduceOp op) {
    switch (dtype) {
        case DType::int8: return reduce_as<std::int8_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::uint8: return reduce_as<std::uint8_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::int16: return reduce_as<std::int16_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::uint16: return reduce_as<std::uint16_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::int32: return reduce_as<std::int32_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::uint32: return reduce_as<std::uint32_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::int64: return reduce_as<std::int64_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::uint64: return reduce_as<std::uint64_t>(srcs, nsrcs, dst, dst2, count, op);
        case DType::float16: return reduce_as<Half>(srcs, nsrcs, dst, dst2, count, op);
        case DType::bfloat16: return reduce_as<Bf16>(srcs, nsrcs, dst, dst2, count, op);
        case DType::float32: return reduce_as<float>(srcs, nsrcs, dst, dst2, count, op);
        case DType::float64: return reduce_as<double>(srcs, nsrcs, dst, dst2, count, op);
    }
}

// ---- division (avg) -----------------------------------------------------------------------------------------

// float32 and float64 divide in double, as a single rounding of the exact quotient would; 16-bit floats divide
// their float32 value by the float32 divisor.
template <class T>
void divide_16bit(T* p, std::size_t count, float d) {
    std::size_t i = 0;
#if defined(__AVX512F__)
    for (; i + kLanes <= count; i += kLanes) store(p + i, _mm512_div_ps(load(p + i), _mm512_set1_ps(d)));
#elif defined(CCL_CORE_VECTORS)
    for (; i + kLanes <= count; i += kLanes) store(p + i, _mm256_div_ps(load(p + i), _mm256_set1_ps(d)));
#endif
    for (; i < count; ++i) p[i] = from_float<T>(to_float(p[i]) / d);
}

bool divide(void* buffer, std::size_t count, DType dtype, double divisor) {
    switch (dtype) {
        case DType::float32: {
            auto* p = static_cast<float*>(buffer);
            for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<float>(p[i] / divisor);
            return true;
        }
        case DType::float64: {
            auto* p = static_cast<double*>(buffer);
            for (std::size_t i = 0; i < count; ++i) p[i] = p[i] / divisor;
            return true;
        }
        case DType::float16: divide_16bit(static_cast<Half*>(buffer), count, static_cast<float>(divisor)); return true;
        case DType::bfloat16: divide_16bit(static_cast<Bf16*>(buffer), count, static_cast<float>(divisor)); return true;
        default: return false;
    }
}

// A copy whose destination is not read again soon: stores that bypass the cache (no read for ownership of the
// destination's lines, no eviction of what the cache holds), then a fence, so that what follows (a published counter)
// is seen after them. Levels without 32-byte vectors copy plainly.
void copy_streaming(void* dst, const void* src, std::size_t bytes) {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
#if defined(__AVX2__)
    std::size_t i = 0;
    for (; i < bytes && (reinterpret_cast<std::uintptr_t>(d + i) & 63) != 0; ++i) d[i] = s[i];  // streams need alignment
#if defined(__AVX512F__)
    for (; i + 64 <= bytes; i += 64) {
        _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), _mm512_loadu_si512(s + i));
    }
#endif
    for (; i + 32 <= bytes; i += 32) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    }
    for (; i < bytes; ++i) d[i] = s[i];
    _mm_sfence();
#else
    __builtin_memcpy(d, s, bytes);
#endif
}

const KernelTable table{CCL_CORE_STRING(CCL_CORE_KERNEL_LEVEL), &reduce, &divide, &copy_streaming};

}  // namespace

const KernelTable& CCL_CORE_CONCAT(kernels_, CCL_CORE_KERNEL_LEVEL)() { return table; }

}  // namespace ccl_core::detail
