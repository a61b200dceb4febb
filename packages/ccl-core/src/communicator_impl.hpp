// A host communicator = the oneCCL engine plus ccl-core's shared-memory path or, across hosts, its hierarchical
// path (private to ccl-core).
#pragma once

#include <ccl_core/communicator.hpp>

#include "communicator_internals.hpp"
#include "hierarchy/hierarchy.hpp"
#include "oneccl/engine_operation.hpp"
#include "shm/shm_collectives.hpp"

#include <memory>
#include <string>

namespace ccl_core {

class Communicator::Impl {
public:
    // The engine first: members go in reverse order, so the segment's last owner here lets go before the engine,
    // whose destructor releases the path before oneCCL's communicator.
    std::shared_ptr<Engine> engine;
    std::shared_ptr<detail::ShmCollectives> shm;  // ops without oneCCL when every rank is on this host
    std::string shm_status = "off: the group spans hosts";  // "on", or why the group agreed on oneCCL
    std::shared_ptr<detail::Hierarchy> hierarchy;  // ops through each host's ranks, across hosts
    std::string hierarchy_status = "off: the group is on one host";
    int subgroups_made = 0;  // same on every rank, since subgroup() is collective

    // An aborted group's inner communicators are aborted too: their destructors would wait for peers that may be gone.
    ~Impl() {
        if (hierarchy && engine->aborted()) hierarchy->abort("the group was aborted");
    }
};

namespace detail {

// An operation that runs through the shared-memory path: done when the segment's queue has completed it. Waiting
// sleeps on the segment's futex until a peer publishes progress.
class SharedMemoryOperation final : public EngineOperation {
public:
    SharedMemoryOperation(std::shared_ptr<Engine> engine, std::string op, std::function<void()> finish,
                          std::shared_ptr<ShmCollectives> shm, std::shared_ptr<ShmCollectives::Op> queued)
        : EngineOperation(engine, std::move(op), engine->all_ranks(), std::move(finish)),
          shm_(std::move(shm)), queued_(std::move(queued)) {}

private:
    bool step() override { return shm_->progress(*queued_); }
    bool sleeps_on_peers() const override { return true; }
    bool moves_through_oneccl() const override { return false; }
    void sleep_on_peers(const std::function<bool()>& ready, std::chrono::microseconds limit) override {
        shm_->sleep_unless(ready, limit);
    }
    const char* failing_layer() const override { return ""; }

    std::shared_ptr<ShmCollectives> shm_;
    std::shared_ptr<ShmCollectives::Op> queued_;
};

}  // namespace detail

}  // namespace ccl_core
