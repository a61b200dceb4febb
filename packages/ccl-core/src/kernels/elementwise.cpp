#include "elementwise.hpp"

#include "kernels.hpp"

#include "../settings.hpp"

#include <ccl_core/errors.hpp>

#include <cstdlib>
#include <string>

namespace ccl_core::detail {
namespace {

struct Level {
    const char* name;
    const KernelTable& (*table)();
    bool (*cpu_has)();
};

// Fastest first. __builtin_cpu_supports also checks that the OS saves the registers the level uses.
const Level levels[] = {
#if defined(CCL_CORE_HAVE_X86_KERNELS)
    {"avx512", &kernels_avx512, [] {
         return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                __builtin_cpu_supports("f16c");
     }},
    {"avx2", &kernels_avx2, [] { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"); }},
#endif
    {"baseline", &kernels_baseline, [] { return true; }},
};

// The level CCL_CORE_KERNEL names, else the best the CPU has. Throws for an unknown or unsupported name; the
// function-local static in kernels() then stays unset and the next call raises again.
const KernelTable& choose() {
    const std::string forced = setting_text("CCL_CORE_KERNEL");
    if (forced.empty()) {
        for (const Level& level : levels) {
            if (level.cpu_has()) return level.table();
        }
    }
    std::string known;
    for (const Level& level : levels) {
        known += (known.empty() ? "" : ", ") + std::string(level.name);
        if (forced != level.name) continue;
        if (!level.cpu_has()) {
            throw Unsupported("CCL_CORE_KERNEL=" + forced + ": this CPU lacks the instructions of that " +
                              "level; it supports: " + [] {
                                  std::string s;
                                  for (const std::string& l : supported_kernel_levels()) s += (s.empty() ? "" : ", ") + l;
                                  return s;
                              }());
        }
        return level.table();
    }
    throw InvalidArgument("CCL_CORE_KERNEL=" + forced + " is not a kernel level; use one of: " + known +
                          " (or unset it to use the best the CPU has)");
}

const KernelTable& kernels() {
    static const KernelTable& chosen = choose();
    return chosen;
}

}  // namespace

void reduce_sources(const void* const* srcs, int nsrcs, void* dst, void* dst2, std::size_t count, DType dtype,
                    ReduceOp op) {
    kernels().reduce(srcs, nsrcs, dst, dst2, count, dtype, op);
}

void copy_streaming(void* dst, const void* src, std::size_t bytes) { kernels().copy_streaming(dst, src, bytes); }

void divide_in_place(void* buffer, std::size_t count, DType dtype, double divisor) {
    if (!kernels().divide(buffer, count, dtype, divisor)) {
        throw Unsupported(std::string("division of ") + dtype_name(dtype) + " buffers is not supported");
    }
}

}  // namespace ccl_core::detail

namespace ccl_core {

std::string kernel_level() { return detail::kernels().level; }

std::vector<std::string> supported_kernel_levels() {
    std::vector<std::string> out;
    for (const detail::Level& level : detail::levels) {
        if (level.cpu_has()) out.emplace_back(level.name);
    }
    return out;
}

}  // namespace ccl_core
