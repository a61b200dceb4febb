// A group's collectives without the hierarchy: each op through the path the router chooses (route.hpp) between the
// shared-memory path, when every rank shares this host, and oneCCL (its NaN-aware variant for floating min/max).
// Arguments are checked before (validate.hpp). Host communicators run their ops here unless the hierarchy takes them;
// the hierarchy runs its stages on two of these (a host's ranks, and one local index per host).
#pragma once

#include "route.hpp"

#include "../shm/shm_collectives.hpp"

#include <ccl_core/group.hpp>
#include <ccl_core/oneccl/engine.hpp>
#include <ccl_core/op_args.hpp>
#include <ccl_core/request.hpp>

#include <functional>
#include <memory>
#include <string>

namespace ccl_core::detail {

class FlatCollectives {
public:
    // Creates the oneCCL engine over `group` and, when every rank shares this host, the shared-memory path
    // (collective, within `timeout`); `shm_status` says "on", or why not.
    static std::shared_ptr<FlatCollectives> create(std::shared_ptr<Group> group, Milliseconds timeout,
                                                   std::string& shm_status);

    const std::shared_ptr<Group>& group() const { return group_; }
    ShmCollectives* shm() const { return shm_.get(); }
    GroupPaths paths() const;

    // Runs `a` on `path` (shared_memory, nan_aware or oneccl); `finish` runs once it is through (avg's division).
    // `runs`: where the blocks of an allgather's output or of a reduce_scatter's input lie (shared memory only).
    Request run(const OpArgs& a, Path path, std::function<void()> finish = {},
                std::shared_ptr<const ShmCollectives::Runs> runs = nullptr);
    // Runs `a` on the path the router chooses for this group.
    Request run(const OpArgs& a, std::function<void()> finish = {});

private:
    FlatCollectives() = default;
    Request through_shared_memory(const OpArgs& a, std::function<void()> finish,
                                  std::shared_ptr<const ShmCollectives::Runs> runs);
    Request through_oneccl(const OpArgs& a, std::function<void()> finish);
    Request nan_aware(const OpArgs& a);

    std::shared_ptr<Group> group_;
    std::shared_ptr<Engine> engine_;
    std::shared_ptr<ShmCollectives> shm_;  // let go before the engine (see ~Engine)
};

}  // namespace ccl_core::detail
