// The element-wise kernels ccl-core runs itself (the shared-memory path's reductions, avg's division, MIN/MAX over
// oneCCL): one source, reduce_kernels.cpp, compiled once per instruction-set level; elementwise.cpp picks a level
// at load from what the CPU reports, so one binary package runs on every x86-64 host.
#pragma once

#include <ccl_core/types.hpp>

#include <cstddef>

namespace ccl_core::detail {

struct KernelTable {
    const char* level;  // "baseline", "avx2", "avx512"
    // dst[i] (and dst2[i] unless null) = srcs[0][i] op srcs[1][i] op ... in source order (see elementwise.hpp).
    void (*reduce)(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count, DType dtype,
                   ReduceOp op);
    // buffer[i] /= divisor; false for a dtype that is not floating (the caller raises: kernels stay free of
    // library code, whose inline copies would otherwise be built for this level's instruction set).
    bool (*divide)(void* buffer, std::size_t count, DType dtype, double divisor);
    // memcpy with stores that bypass the cache, fenced (a destination not read again soon).
    void (*copy_streaming)(void* dst, const void* src, std::size_t bytes);
};

// One per level; a level exists in the build only where its compiler flags do (x86-64).
const KernelTable& kernels_baseline();
#if defined(CCL_CORE_HAVE_X86_KERNELS)
const KernelTable& kernels_avx2();
const KernelTable& kernels_avx512();
#endif

}  // namespace ccl_core::detail
