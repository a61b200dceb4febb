// One-sided windows on registered memory (window.hpp).
#include "window.hpp"

#ifdef C10D_BACKEND_HAS_WINDOW

#include "interrupts.hpp"
#include "process_group_ccl.hpp"
#include "torch_errors.hpp"

#include <ccl_core/backoff.hpp>
#include <ccl_core/errors.hpp>

#include <c10/util/Exception.h>

#include <array>
#include <cstring>
#include <mutex>

namespace ccl_torch {
namespace {

// put and signal are done when they return (a copy, an atomic add): their works are complete from the start.
class DoneWork final : public c10d::Work {
public:
    DoneWork() { finish(); }
    bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
};

// A wait for the `ticket`-th signal from `peer`: complete once the peer's counter here reaches it. Waiting naps on
// ccl-core's schedule (almost no CPU for a late peer); the deadline runs from the call.
class SignalWait final : public c10d::Work {
public:
    SignalWait(std::shared_ptr<void> counters, const std::uint64_t* counter, std::uint64_t ticket, int peer,
               std::chrono::milliseconds timeout)
        : counters_(std::move(counters)), counter_(counter), ticket_(ticket), peer_(peer), timeout_(timeout) {}

    bool isCompleted() override {
        if (arrived()) std::call_once(finished_, [this] { finish(); });
        return arrived();
    }
    bool wait(std::chrono::milliseconds timeout) override {
        auto limit = timeout_;
        if (timeout != kNoTimeout && timeout < limit) limit = timeout;
        ccl_core::Backoff backoff;
        auto next_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
        bool interrupted = false;
        while (!arrived()) {
            const auto now = std::chrono::steady_clock::now();
            if (now >= next_check) {  // Ctrl-C (interrupts.hpp); the signal waited for still counts for this ticket
                next_check = now + std::chrono::milliseconds(50);
                check_for_interrupt(interrupted);
            }
            if (now - start_ >= limit) {
                C10_THROW_ERROR(DistBackendError,
                                c10::str("ccl: window wait_signal: signal #", ticket_, " from rank ", peer_,
                                         " did not arrive within ", limit.count(), " ms (", current(),
                                         " arrived so far)"));
            }
            backoff.pause(now);
        }
        std::call_once(finished_, [this] { finish(); });
        return true;
    }

private:
    std::uint64_t current() const { return __atomic_load_n(counter_, __ATOMIC_ACQUIRE); }
    bool arrived() const { return current() >= ticket_; }

    const std::shared_ptr<void> counters_;  // keeps the counters mapped
    const std::uint64_t* const counter_;
    const std::uint64_t ticket_;
    const int peer_;
    const std::chrono::milliseconds timeout_;
    const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
    std::once_flag finished_;
};

// What a rank says of its region in an exchange: whether it has one, where it lies, its dtype and length.
enum RegionField { kRegionHas, kRegionSerial, kRegionOffset, kRegionBytes, kRegionDtype, kRegionFields };

}  // namespace

CCLWindow::CCLWindow(std::shared_ptr<ccl_core::Communicator> comm, std::chrono::milliseconds timeout)
    : comm_(std::move(comm)), rank_(comm_->rank()), size_(comm_->size()), timeout_(timeout),
      signals_(static_cast<std::size_t>(size_)), tickets_(static_cast<std::size_t>(size_), 0) {
    const std::size_t bytes = static_cast<std::size_t>(size_) * sizeof(std::uint64_t);
    my_signals_ = comm_->allocate(bytes);
    ccl_core::Communicator::RegisteredRegion mine;
    if (my_signals_) {
        std::memset(my_signals_.get(), 0, bytes);
        std::shared_ptr<void> hold;
        mine = comm_->locate_registered(my_signals_.get(), bytes, hold);
    }
    const auto regions = exchange(mine, my_signals_ ? 1 : 0);
    for (int p = 0; p < size_; ++p) {
        signals_[static_cast<std::size_t>(p)] =
            p == rank_ ? std::shared_ptr<char>(my_signals_, static_cast<char*>(my_signals_.get()))
                       : translate_errors([&] { return comm_->map_registered(p, regions[static_cast<std::size_t>(p)]); });
    }
}

std::vector<ccl_core::Communicator::RegisteredRegion> CCLWindow::exchange(
    const ccl_core::Communicator::RegisteredRegion& mine, std::int64_t has) {
    std::array<std::int64_t, kRegionFields> said{};
    said[kRegionHas] = has;
    said[kRegionSerial] = static_cast<std::int64_t>(mine.serial);
    said[kRegionOffset] = static_cast<std::int64_t>(mine.offset);
    said[kRegionBytes] = static_cast<std::int64_t>(mine.bytes);
    said[kRegionDtype] = static_cast<std::int64_t>(dtype_);
    std::vector<std::int64_t> all(static_cast<std::size_t>(size_) * kRegionFields);
    translate_errors([&] {
        comm_->allgather(said.data(), all.data(), kRegionFields, ccl_core::DType::int64).wait(timeout_);
    });
    std::vector<ccl_core::Communicator::RegisteredRegion> regions(static_cast<std::size_t>(size_));
    std::string missing;
    for (int p = 0; p < size_; ++p) {
        const std::int64_t* r = all.data() + static_cast<std::size_t>(p) * kRegionFields;
        if (r[kRegionHas] == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
        regions[static_cast<std::size_t>(p)] = {static_cast<std::uint64_t>(r[kRegionSerial]),
                                                static_cast<std::uint64_t>(r[kRegionOffset]),
                                                static_cast<std::uint64_t>(r[kRegionBytes])};
    }
    // every rank reads the same numbers, so every rank raises alike
    CCL_CHECK_ARGUMENT(missing.empty(), "window: rank(s) ", missing, " have no registered memory to offer (a tensor "
                       "from this group's allocate_tensor, and room for it in /dev/shm)");
    for (int p = 0; p < size_; ++p) {
        const std::int64_t* r = all.data() + static_cast<std::size_t>(p) * kRegionFields;
        CCL_CHECK_DTYPE(r[kRegionDtype] == all[kRegionDtype], "window: every rank must register the same dtype; rank 0 has ",
                        static_cast<at::ScalarType>(all[kRegionDtype]), ", rank ", p, " has ",
                        static_cast<at::ScalarType>(r[kRegionDtype]));
    }
    return regions;
}

void CCLWindow::tensor_register(const at::Tensor& tensor, bool owning) {
    std::lock_guard<std::mutex> lock(mutex_);
    CCL_CHECK_ARGUMENT(!hold_, "tensor_register: this window already has a tensor (tensor_deregister it first)");
    // a problem here is said in the exchange too, so that every rank raises, not only this one
    std::string problem;
    std::shared_ptr<void> hold;
    ccl_core::Communicator::RegisteredRegion mine;
    if (!tensor.device().is_cpu()) {
        problem = c10::str("a ccl window holds CPU tensors, got device ", tensor.device());
    } else if (!tensor.is_contiguous()) {
        problem = "the tensor must be contiguous";
    } else {
        try {
            mine = comm_->locate_registered(tensor.data_ptr(), static_cast<std::size_t>(tensor.nbytes()), hold);
        } catch (const ccl_core::InvalidArgument&) {
            problem = "the tensor must come from this group's allocate_tensor (registered memory), which every rank "
                      "on the host can map";
        }
    }
    dtype_ = tensor.scalar_type();
    std::vector<ccl_core::Communicator::RegisteredRegion> regions;
    try {
        regions = exchange(mine, problem.empty() ? 1 : 0);
    } catch (const std::exception&) {
        if (!problem.empty()) throw_argument_error("tensor_register: " + problem);
        throw;
    }
    std::vector<std::shared_ptr<char>> peers(static_cast<std::size_t>(size_));
    for (int p = 0; p < size_; ++p) {
        if (p != rank_) {
            peers[static_cast<std::size_t>(p)] =
                translate_errors([&] { return comm_->map_registered(p, regions[static_cast<std::size_t>(p)]); });
        }
    }
    numel_.clear();
    for (const auto& region : regions) numel_.push_back(static_cast<int64_t>(region.bytes / tensor.element_size()));
    peers_ = std::move(peers);
    hold_ = std::move(hold);
    mine_ = static_cast<char*>(tensor.data_ptr());
    if (owning) tensor_ = tensor;
}

void CCLWindow::tensor_deregister() {
    // collective: once every rank is here, no peer puts into this rank's tensor any more
    translate_errors([&] { comm_->barrier().wait(timeout_); });
    std::lock_guard<std::mutex> lock(mutex_);
    peers_.clear();
    numel_.clear();
    tensor_ = at::Tensor();
    hold_.reset();
    mine_ = nullptr;
}

void CCLWindow::check_peer(int64_t rank, const char* what) const {
    CCL_CHECK_ARGUMENT(rank >= 0 && rank < size_, what, ": rank ", rank, " is out of range for a group of ", size_);
}

c10::intrusive_ptr<c10d::Work> CCLWindow::put(const at::Tensor& tensor, int64_t dst_rank, int64_t target_offset_nelems,
                                              bool /*async_op*/, const c10d::PutOptions& /*opts*/) {
    check_peer(dst_rank, "put");
    CCL_CHECK_ARGUMENT(tensor.device().is_cpu(), "put: a ccl window takes CPU tensors, got device ", tensor.device());
    std::lock_guard<std::mutex> lock(mutex_);
    CCL_CHECK_ARGUMENT(hold_, "put: no tensor is registered with this window (new_window(tensor) or tensor_register)");
    CCL_CHECK_DTYPE(tensor.scalar_type() == dtype_, "put: the window holds ", dtype_, ", got ", tensor.scalar_type());
    const int64_t room = numel_[static_cast<std::size_t>(dst_rank)];
    CCL_CHECK_ARGUMENT(target_offset_nelems >= 0 && target_offset_nelems + tensor.numel() <= room, "put: ",
                       tensor.numel(), " element(s) at offset ", target_offset_nelems, " do not fit rank ", dst_rank,
                       "'s window of ", room, " element(s)");
    const at::Tensor source = tensor.contiguous();
    char* target = dst_rank == rank_ ? mine_ : peers_[static_cast<std::size_t>(dst_rank)].get();
    std::memcpy(target + target_offset_nelems * source.element_size(), source.data_ptr(),
                static_cast<std::size_t>(source.nbytes()));
    return c10::make_intrusive<DoneWork>();
}

at::Tensor CCLWindow::map_remote_tensor(int64_t rank) {
    check_peer(rank, "map_remote_tensor");
    std::lock_guard<std::mutex> lock(mutex_);
    CCL_CHECK_ARGUMENT(hold_, "map_remote_tensor: no tensor is registered with this window");
    const auto options = at::TensorOptions().dtype(dtype_).device(c10::kCPU);
    const int64_t n = numel_[static_cast<std::size_t>(rank)];
    if (rank == rank_) {
        return at::from_blob(mine_, {n}, [hold = hold_](void*) {}, options);
    }
    auto mapping = peers_[static_cast<std::size_t>(rank)];
    return at::from_blob(mapping.get(), {n}, [mapping](void*) {}, options);  // the view keeps the mapping
}

c10::intrusive_ptr<c10d::Work> CCLWindow::signal(int64_t peer_rank, bool /*async_op*/,
                                                 const c10d::SignalOptions& /*opts*/) {
    check_peer(peer_rank, "signal");
    auto* counters = reinterpret_cast<std::uint64_t*>(signals_[static_cast<std::size_t>(peer_rank)].get());
    __atomic_fetch_add(&counters[rank_], 1, __ATOMIC_RELEASE);  // after this rank's puts, for the peer's acquire
    return c10::make_intrusive<DoneWork>();
}

std::chrono::milliseconds CCLWindow::timeout_of(std::chrono::milliseconds asked) const {
    return asked == c10d::kUnsetTimeout ? timeout_ : asked;
}

c10::intrusive_ptr<c10d::Work> CCLWindow::wait_signal(int64_t peer_rank, bool async_op,
                                                      const c10d::WaitSignalOptions& opts) {
    check_peer(peer_rank, "wait_signal");
    std::uint64_t ticket;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        ticket = ++tickets_[static_cast<std::size_t>(peer_rank)];
    }
    const auto* counters = static_cast<const std::uint64_t*>(my_signals_.get());
    auto work = c10::make_intrusive<SignalWait>(my_signals_, &counters[peer_rank], ticket, static_cast<int>(peer_rank),
                                                timeout_of(opts.timeout));
    if (!async_op) work->wait(kNoTimeout);
    return work;
}

c10d::WindowAttr CCLWindow::get_attr(int64_t peer_rank) {
    check_peer(peer_rank, "get_attr");
    return c10d::WindowAttr{c10d::WindowAccessType::UNIFIED};  // plain shared memory: one coherent view
}

// ---- the backend's side ------------------------------------------------------------------------------------------

bool ProcessGroupCCL::supportsWindow() const { return has_registered_memory(); }

c10::intrusive_ptr<c10d::Window> ProcessGroupCCL::new_window(const std::optional<at::Tensor>& tensor) {
    auto comm = communicator("new_window");
    TORCH_CHECK_NOT_IMPLEMENTED(comm->shared_memory(), "ccl: new_window needs every rank of the group on one host "
                                "with the shared-memory path on (this group: ", comm->shared_memory_status(), ")");
    auto window = c10::make_intrusive<CCLWindow>(comm, std::chrono::milliseconds(timeout_ms_.load()));
    if (tensor) window->tensor_register(*tensor, true);
    return window;
}

}  // namespace ccl_torch

#endif  // C10D_BACKEND_HAS_WINDOW
