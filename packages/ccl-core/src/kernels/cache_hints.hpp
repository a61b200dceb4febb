// Hints to the caches for lines that another core reads next.
//
// A line a rank has just written sits modified in its own core's private caches, and a peer's read of it must then
// snoop that core: on the 16-core Xeon this costs about 16 ns per line and reading core, which is what the
// shared-memory path's small and mid-size messages spend most of their time on at 8-16 ranks. CLDEMOTE (Intel, from
// Sapphire Rapids and Tremont on) moves such a line to the shared last-level cache ahead of the read. It is a hint: it
// never changes what is read. Other CPUs execute its encoding as a no-op; there the loop is skipped altogether.
#pragma once

#include <cstddef>

namespace ccl_core::detail {

// Whether hand_to_peers() does anything here: the CPU has CLDEMOTE and CCL_CORE_SHM_DEMOTE is 1 (read once).
bool demoting_lines();
// Moves the cache lines of [p, p + bytes), which this thread just wrote and peers read next, from this core's private
// caches to the shared one.
void hand_to_peers(const void* p, std::size_t bytes);

}  // namespace ccl_core::detail
