#include "cache_hints.hpp"

#include "../settings.hpp"

#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace ccl_core::detail {
namespace {

constexpr std::uintptr_t kLine = 64;

bool cpu_has_cldemote() {
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && ((c >> 25) & 1u) != 0;  // CPUID.(7,0):ECX[25]
#else
    return false;
#endif
}

#if defined(__x86_64__)
// Compiled for CLDEMOTE alone (the rest of the library targets baseline x86-64); called only where the CPU has it.
__attribute__((target("cldemote"))) void demote(std::uintptr_t line, std::uintptr_t end) {
    for (; line < end; line += kLine) _cldemote(reinterpret_cast<void*>(line));
}
#endif

}  // namespace

bool demoting_lines() {
    static const bool on = cpu_has_cldemote() && setting_on("CCL_CORE_SHM_DEMOTE");
    return on;
}

void hand_to_peers(const void* p, std::size_t bytes) {
#if defined(__x86_64__)
    if (bytes == 0 || !demoting_lines()) return;
    const auto begin = reinterpret_cast<std::uintptr_t>(p);
    demote(begin & ~(kLine - 1), begin + bytes);
#else
    (void)p;
    (void)bytes;
#endif
}

}  // namespace ccl_core::detail
