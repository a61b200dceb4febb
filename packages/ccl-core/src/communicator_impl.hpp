// A host communicator = its group, the group's flat collectives (the shared-memory path when every rank shares this
// host, and the oneCCL engine) and, across hosts, the hierarchy (private to ccl-core).
#pragma once

#include <ccl_core/communicator.hpp>

#include "hierarchy/hierarchy.hpp"
#include "routing/flat_collectives.hpp"
#include "routing/route.hpp"

#include <memory>
#include <string>

namespace ccl_core {

class Communicator::Impl {
public:
    std::shared_ptr<Group> group;
    std::shared_ptr<detail::FlatCollectives> flat;  // the engine, and the shared-memory path if every rank is here
    std::string shm_status = "off: the group spans hosts";  // "on", or why the group agreed on oneCCL
    std::shared_ptr<detail::Hierarchy> hierarchy;  // ops through each host's ranks, across hosts
    std::string hierarchy_status = "off: the group is on one host";
    detail::GroupPaths paths;  // what the router may choose from
    int subgroups_made = 0;  // same on every rank, since subgroup() is collective

    // An aborted group's inner groups are aborted too: their engines would wait for peers that may be gone.
    ~Impl() {
        if (hierarchy && group->aborted()) hierarchy->abort("the group was aborted");
    }
};

}  // namespace ccl_core
