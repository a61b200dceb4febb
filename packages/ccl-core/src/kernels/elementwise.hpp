// Element-wise steps that oneCCL lacks on CPU and ccl-core runs itself: avg's division after an operation,
// and the reduction of the shared-memory allreduce (shm_collectives.hpp).
#pragma once

#include <ccl_core/types.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace ccl_core::detail {

// buffer[i] /= divisor for a floating dtype (avg = sum / group size).
void divide_in_place(void* buffer, std::size_t count, DType dtype, double divisor);

// dst[i] (and also dst2[i] unless it is null) = srcs[0][i] op srcs[1][i] op ... in source order, so every rank that
// reduces the same sources gets the same bits. Destinations may alias sources. avg reduces as sum (the caller
// divides); float16/bfloat16 accumulate in float and round once; integers wrap like two's complement.
void reduce_sources(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count, DType dtype,
                    ReduceOp op);

// memcpy whose stores bypass the cache (the destination is not read again soon), fenced before it returns.
void copy_streaming(void* dst, const void* src, std::size_t bytes);

}  // namespace ccl_core::detail

namespace ccl_core {

// The instruction-set level of the kernels in use ("avx512", "avx2", "baseline"): the best the CPU has, or the one
// CCL_CORE_KERNEL names. Throws InvalidArgument for an unknown name and Unsupported for a level this CPU lacks;
// initialize_runtime() checks it, so a communicator is never made with a bad setting.
std::string kernel_level();
// The levels this build has and this CPU can run, fastest first.
std::vector<std::string> supported_kernel_levels();

}  // namespace ccl_core
