// The shared-memory path's copies and reductions, spread over the worker pool (worker_pool.hpp) when they are large
// enough to pay for the helpers' wake-up, else on the calling thread alone.
#pragma once

#include <ccl_core/types.hpp>

#include <cstddef>

namespace ccl_core::detail {

// Where a copy's destination is read next: by a peer soon (a slot), or not soon by anyone (the caller's output of a
// message larger than the caches: its stores then bypass them).
enum class Destination { read_soon, not_read_soon };

void parallel_copy(void* dst, const void* src, std::size_t bytes, Destination where = Destination::read_soon);
// reduce_sources (elementwise.hpp), each element by one thread: the same bits.
void parallel_reduce(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count, DType dtype,
                     ReduceOp op);

}  // namespace ccl_core::detail
