// What the hierarchical path asks of its host communicator beyond the public collectives: an allgather and a
// reduce_scatter whose blocks lie in runs (ShmCollectives::Runs), through that communicator's shared-memory path.
// Defined in communicator.cpp; only for a communicator whose shared_memory() is true.
#pragma once

#include "shm/shm_collectives.hpp"

#include <ccl_core/communicator.hpp>

#include <memory>

namespace ccl_core::detail {

struct CommunicatorInternals {
    static Request allgather_into_runs(Communicator& c, const void* send, void* recv, std::size_t count, DType dtype,
                                       std::shared_ptr<const ShmCollectives::Runs> runs);
    static Request reduce_scatter_from_runs(Communicator& c, const void* send, void* recv, std::size_t count,
                                            DType dtype, ReduceOp op, std::shared_ptr<const ShmCollectives::Runs> runs);
};

}  // namespace ccl_core::detail
