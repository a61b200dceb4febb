// One-sided windows (torch 2.15's Backend::new_window, c10d::Window) on registered memory: every rank of a host group
// maps its peers' registered tensors for reading and writing, so that put is a copy into the peer's tensor and
// map_remote_tensor a view of it. signal / wait_signal count in a small registered block per rank: signal adds one
// to the peer's counter for this rank (after the puts before it, release), wait_signal waits for the next one
// (acquire), so that what a peer put before signalling is visible once its signal is seen.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#ifdef C10D_BACKEND_HAS_WINDOW

#include <ccl_core/communicator.hpp>

#include <torch/csrc/distributed/c10d/Window.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace ccl_torch {

class CCLWindow final : public c10d::Window {
public:
    // Collective over the group (new_window): each rank allocates its signal counters and maps its peers'.
    CCLWindow(std::shared_ptr<ccl_core::Communicator> comm, std::chrono::milliseconds timeout);

    void tensor_register(const at::Tensor& tensor, bool owning) override;
    void tensor_deregister() override;
    c10::intrusive_ptr<c10d::Work> put(const at::Tensor& tensor, int64_t dst_rank, int64_t target_offset_nelems,
                                       bool async_op, const c10d::PutOptions& opts) override;
    at::Tensor map_remote_tensor(int64_t rank) override;
    c10::intrusive_ptr<c10d::Work> signal(int64_t peer_rank, bool async_op, const c10d::SignalOptions& opts) override;
    c10::intrusive_ptr<c10d::Work> wait_signal(int64_t peer_rank, bool async_op,
                                               const c10d::WaitSignalOptions& opts) override;
    c10d::WindowAttr get_attr(int64_t peer_rank) override;

private:
    // Each rank's registered region, exchanged by an allgather of its numbers (collective).
    std::vector<ccl_core::Communicator::RegisteredRegion> exchange(const ccl_core::Communicator::RegisteredRegion& mine,
                                                                   std::int64_t tag);
    void check_peer(int64_t rank, const char* what) const;
    std::chrono::milliseconds timeout_of(std::chrono::milliseconds asked) const;

    const std::shared_ptr<ccl_core::Communicator> comm_;
    const int rank_, size_;
    const std::chrono::milliseconds timeout_;
    // signal counters: mine (slot p counts the signals rank p sent here) and every rank's, mapped here
    std::shared_ptr<void> my_signals_;
    std::vector<std::shared_ptr<char>> signals_;

    std::mutex mutex_;  // guards what follows (register / deregister against put and map_remote_tensor)
    std::vector<std::uint64_t> tickets_;  // per peer: signals waited for so far (issued waits)
    at::Tensor tensor_;          // this rank's registered tensor (held when owning)
    std::shared_ptr<void> hold_;  // its registered block, kept from the pool while registered
    at::ScalarType dtype_ = at::kFloat;
    std::vector<std::int64_t> numel_;          // every rank's registered elements (from its bytes)
    std::vector<std::shared_ptr<char>> peers_;  // every rank's registered tensor, mapped here (nullptr: this rank)
    char* mine_ = nullptr;
};

}  // namespace ccl_torch

#endif  // C10D_BACKEND_HAS_WINDOW
