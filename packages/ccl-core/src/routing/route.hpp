// Which way an op goes: one decision for every op of every group, host or hierarchical, from the op (kind, size,
// dtype, reduce op) and the paths its group has. The communicator and the hierarchy's inner groups both ask here.
#pragma once

#include <ccl_core/op_args.hpp>

#include <cstddef>

namespace ccl_core::detail {

class ShmCollectives;

enum class Path {
    shared_memory,  // ccl-core's shared-memory path (every rank on this host)
    hierarchy,      // inside each host, then across hosts (src/hierarchy)
    nan_aware,      // oneCCL moving the rows, ccl-core reducing them: floating min/max, whose NaN oneCCL drops
    oneccl,         // oneCCL's own algorithms
};

// What a group has of the paths.
struct GroupPaths {
    const ShmCollectives* shm = nullptr;  // every rank on this host, and the group agreed on the path
    // Across hosts with the hierarchy on: ops that move at least `hierarchy_min_bytes` per rank, in at least
    // `hierarchy_min_count` elements (one per local rank), take it. Below that oneCCL's flat path is faster.
    bool hierarchy = false;
    std::size_t hierarchy_min_bytes = 0;
    std::size_t hierarchy_min_count = 0;
    bool hierarchy_allreduce_only = false;  // hosts of unequal rank counts: only allreduce has a hierarchical form
};

Path choose_path(const OpArgs& a, const GroupPaths& paths);

}  // namespace ccl_core::detail
