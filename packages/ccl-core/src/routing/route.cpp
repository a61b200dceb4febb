#include "route.hpp"

#include "../shm/shm_collectives.hpp"

#include <algorithm>

namespace ccl_core::detail {
namespace {

// oneCCL's MIN/MAX drop NaN; torch's (and the shared-memory path's) keep it.
bool drops_nan(DType dtype, ReduceOp op) { return is_floating(dtype) && (op == ReduceOp::min || op == ReduceOp::max); }

// allgatherv with the same count from every rank: what the shared-memory path and the hierarchy gather.
bool even(const OpArgs& a) {
    return std::all_of(a.recv_counts->begin(), a.recv_counts->end(), [&](std::size_t c) { return c == a.count; });
}

bool shared_memory_takes(const OpArgs& a, const ShmCollectives& shm) {
    switch (a.kind) {
        case OpKind::allreduce:
        case OpKind::broadcast:
        case OpKind::barrier: return true;
        case OpKind::allgatherv: return even(a);
        case OpKind::reduce_scatter: return shm.fits(ShmCollectives::Kind::reduce_scatter, a.dtype);
        default: return false;
    }
}

// Per rank: the whole buffer of allreduce and broadcast, one rank's block of allgather and reduce_scatter.
bool hierarchy_takes(const OpArgs& a, const GroupPaths& paths) {
    const bool kind = a.kind == OpKind::allreduce ||
                      (!paths.hierarchy_allreduce_only && (a.kind == OpKind::broadcast || a.kind == OpKind::reduce_scatter ||
                                                           (a.kind == OpKind::allgatherv && even(a))));
    return kind && a.count * dtype_size(a.dtype) >= paths.hierarchy_min_bytes && a.count >= paths.hierarchy_min_count;
}

}  // namespace

Path choose_path(const OpArgs& a, const GroupPaths& paths) {
    if (paths.shm && shared_memory_takes(a, *paths.shm)) return Path::shared_memory;
    if (paths.hierarchy && hierarchy_takes(a, paths)) return Path::hierarchy;
    const bool reduces = a.kind == OpKind::allreduce || a.kind == OpKind::reduce || a.kind == OpKind::reduce_scatter;
    if (reduces && drops_nan(a.dtype, a.op)) return Path::nan_aware;
    return Path::oneccl;
}

}  // namespace ccl_core::detail
