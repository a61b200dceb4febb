#include "parallel_ops.hpp"

#include "worker_pool.hpp"

#include "../kernels/elementwise.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace ccl_core::detail {
namespace {

// Below kBytesAlone a job stays on the caller: waking helpers (a futex wake, some microseconds, when they slept)
// costs more than they save, and the latency of small and mid-size messages is untouched. Above it, every thread
// takes a part of at least kBytesPerPart.
constexpr std::size_t kBytesPerPart = 64 << 10;
constexpr std::size_t kBytesAlone = 1 << 20;
constexpr std::size_t kLine = 64;

int parts_for(std::size_t bytes) {
    if (bytes < kBytesAlone) return 1;  // before the pool: instance() locks and asks for the pid, every small copy paid it
    const int threads = WorkerPool::instance().threads();
    if (threads <= 1) return 1;
    return static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(threads), bytes / kBytesPerPart));
}

void copy(void* dst, const void* src, std::size_t bytes, Destination where) {
    if (where == Destination::not_read_soon) {
        copy_streaming(dst, src, bytes);
    } else {
        std::memcpy(dst, src, bytes);
    }
}

}  // namespace

void parallel_copy(void* dst, const void* src, std::size_t bytes, Destination where) {
    const int parts = parts_for(bytes);
    if (parts <= 1) return copy(dst, src, bytes, where);
    WorkerPool::instance().run(parts, [&](int i) {
        std::size_t begin, end;
        WorkerPool::split(bytes, kLine, i, parts, begin, end);
        copy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin, where);
    });
}

void parallel_reduce(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count, DType dtype,
                     ReduceOp op) {
    const std::size_t element = dtype_size(dtype);
    const int parts = parts_for(count * element * static_cast<std::size_t>(nsrcs));
    if (parts <= 1) return reduce_sources(srcs, nsrcs, dst, dst2, count, dtype, op);
    WorkerPool::instance().run(parts, [&](int i) {
        std::size_t begin, end;
        WorkerPool::split(count, std::max<std::size_t>(1, kLine / element), i, parts, begin, end);
        if (begin == end) return;
        std::vector<const void*> from(static_cast<std::size_t>(nsrcs));
        for (int s = 0; s < nsrcs; ++s) from[static_cast<std::size_t>(s)] = static_cast<const char*>(srcs[s]) + begin * element;
        reduce_sources(from.data(), nsrcs, static_cast<char*>(dst) + begin * element,
                       dst2 ? static_cast<char*>(dst2) + begin * element : nullptr, end - begin, dtype, op);
    });
}

}  // namespace ccl_core::detail
