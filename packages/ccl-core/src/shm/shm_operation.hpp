// An operation that runs through the shared-memory path (shm_collectives.hpp): done when the segment's queue has
// completed it. Waiting sleeps on the segment's futex until a peer publishes progress.
#pragma once

#include "shm_collectives.hpp"

#include "../group/group_operation.hpp"

#include <memory>
#include <string>

namespace ccl_core::detail {

class SharedMemoryOperation final : public GroupOperation {
public:
    SharedMemoryOperation(std::shared_ptr<Group> group, std::string op, std::function<void()> finish,
                          std::shared_ptr<ShmCollectives> shm, std::shared_ptr<ShmCollectives::Op> queued)
        : GroupOperation(group, std::move(op), group->all_ranks(), std::move(finish)), shm_(std::move(shm)),
          queued_(std::move(queued)) {}

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

}  // namespace ccl_core::detail
