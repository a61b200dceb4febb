// The oneCCL engine's life (engine.hpp): its communicator made over a group, and let go; issuing is in issue.cpp.
#include <ccl_core/oneccl/engine.hpp>

#include "oneccl_operation.hpp"
#include "store_kvs.hpp"

#include "../group/local_path.hpp"

#include <algorithm>

namespace ccl_core {

Engine::Engine(std::shared_ptr<Group> group, EngineSettings settings)
    : group_(std::move(group)), settings_(std::move(settings)) {}

std::shared_ptr<Engine> Engine::create(std::shared_ptr<Group> group, EngineSettings settings) {
    std::shared_ptr<Engine> engine(new Engine(std::move(group), std::move(settings)));
    if (engine->settings_.calls_block) engine->calls_held_ = std::make_shared<CallsHeld>();
    const Group& g = *engine->group_;
    try {
        engine->kvs_ = std::make_shared<detail::StoreKvs>(
            std::make_shared<PrefixStore>(g.settings().key_prefix + "/oneccl", g.store()), 0);
        engine->comm_ = std::make_unique<ccl::communicator>(
            engine->settings_.connect ? engine->settings_.connect(g.size(), g.rank(), engine->kvs_)
                                      : ccl::create_communicator(g.size(), g.rank(), engine->kvs_));
    } catch (const std::exception& e) {
        throw BackendError("bootstrap of " + g.describe() + ": oneCCL could not create the communicator: " + e.what());
    }
    return engine;
}

Engine::~Engine() {
    if (group_->aborted()) {
        (void)comm_.release();
        new std::shared_ptr<ccl::kvs_interface>(std::move(kvs_));  // likewise never destroyed
        return;
    }
    if (!comm_) return;  // creation failed: no barrier to protect
    group_->lend_local_path(nullptr);  // the same-host path lets go of its segment before oneCCL's communicator goes
    comm_.reset();  // oneCCL's destructor synchronises the ranks through the store
    kvs_.reset();
    wait_for_departures();
}

void Engine::wait_for_departures() noexcept {
    try {
        PrefixStore departed(group_->settings().key_prefix + "/departed", group_->store());
        departed.set(std::to_string(group_->rank()), Bytes{'1'});
        if (group_->rank() != 0) return;
        const auto limit = std::min(group_->options().timeout, Milliseconds(10000));
        const auto deadline = std::chrono::steady_clock::now() + limit;
        for (int r = 1; r < group_->size(); ++r) {
            const auto left = std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return;
            (void)departed.get(std::to_string(r), left);
        }
    } catch (const std::exception&) {
        // a store that is gone or a rank that never came: nothing more to protect
    }
}

}  // namespace ccl_core
