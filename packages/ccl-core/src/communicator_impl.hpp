// State shared by Communicator and the Requests it issues (private to ccl-core).
#pragma once

#include <ccl_core/communicator.hpp>
#include <ccl_core/errors.hpp>

#include <ccl_core/oneccl/convert.hpp>
#include "shm_collectives.hpp"
#include "shm_cleanup.hpp"

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>

namespace ccl_core {

namespace detail {
// Every call into oneCCL's executor (issuing an op, testing an event) holds this lock. Without the worker
// thread the executor is driven by whichever thread polls; two threads (a caller and a future-completion
// thread, or two groups driven from two threads) must not drive it at once.
inline std::mutex& engine_mutex() {
    static std::mutex m;
    return m;
}
}  // namespace detail

class Communicator::Impl {
public:
    Impl(std::shared_ptr<Store> store, int rank, int size, CommunicatorOptions options)
        : store(std::move(store)), rank(rank), size(size), options(std::move(options)) {}

    // oneCCL's destructors wait for unfinished operations, which never finish once a peer is gone: an
    // aborted communicator is left to the process's end instead of being destroyed.
    ~Impl() {
        if (is_aborted.load()) {
            (void)comm.release();
            new std::shared_ptr<ccl::kvs_interface>(std::move(kvs));  // likewise never destroyed
            return;
        }
        if (!comm) return;  // creation failed: no barrier to protect
        shm.reset();
        comm.reset();  // oneCCL's destructor synchronises the ranks through the store
        kvs.reset();
        wait_for_departures();
    }

    // oneCCL's destructor ends with a barrier over the store, whose last reads may come after a fast rank has
    // left it. Under srun or mpiexec rank 0's process hosts the store: were it to exit then, the others would
    // retry their reads for ever. So every rank records that it is through, and rank 0 waits for all of them
    // (bounded: a rank that died must not hold it).
    void wait_for_departures() noexcept;

    std::shared_ptr<Store> store;
    int rank;
    int size;
    CommunicatorOptions options;
    std::shared_ptr<ccl::kvs_interface> kvs;
    std::unique_ptr<ccl::communicator> comm;
    std::unique_ptr<detail::ShmCollectives> shm;  // allreduce without oneCCL when every rank is on this host
    int subgroups_made = 0;  // same on every rank, since subgroup() is collective
    int local_ranks = 1;     // ranks of this communicator on this host (by host identity, see bootstrap)
    bool oversubscribed = false;  // more ranks on this host than cores we may run on: waiting must sleep
    std::vector<std::pair<int, pid_t>> local_peer_pids;  // (rank, process) of same-host peers (shm_cleanup.hpp)

    // Threads inside a wait() on one of this communicator's ops: that wait drives the communicator's progress,
    // so the progress thread stays out of its way (two pollers on the same ops only compete for the cores).
    std::atomic<int> waiters{0};

    std::atomic<bool> is_aborted{false};
    std::mutex abort_mutex;
    std::string abort_reason;

    void abort(const std::string& reason) {
        std::lock_guard<std::mutex> lock(abort_mutex);
        if (is_aborted.exchange(true)) return;
        abort_reason = reason;
        std::vector<pid_t> pids;
        for (const auto& peer : local_peer_pids) pids.push_back(peer.second);
        detail::remove_shm_of_dead_processes(pids);
    }
    void throw_if_aborted(const char* op) {
        if (!is_aborted.load(std::memory_order_relaxed)) return;
        std::lock_guard<std::mutex> lock(abort_mutex);
        throw CommunicatorAborted(std::string(op) + ": " + describe() +
                                  " was aborted and cannot be used any more (" + abort_reason + ")");
    }
    // The first same-host peer whose process is gone, as "rank R (pid P)", or "" while all live.
    std::string dead_local_peer() const {
        for (const auto& [r, pid] : local_peer_pids) {
            if (detail::process_is_gone(pid)) return "rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ")";
        }
        return "";
    }
    std::string describe() const {
        return "communicator '" + options.name + "' (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
    }
};

namespace detail {

// A request of this communicator: a oneCCL event or a shared-memory allreduce (request.cpp).
class EngineOperation final : public PendingOperation, public std::enable_shared_from_this<EngineOperation> {
public:
    EngineOperation(std::shared_ptr<Communicator::Impl> comm, std::string op, std::string peers)
        : comm(std::move(comm)), op(std::move(op)), peers(std::move(peers)) {}

    // One round of the progress thread (progress_thread.hpp): true once nothing is left to do (complete, failed,
    // timed out after the communicator's timeout, or a same-host peer died). A failure is kept for the caller.
    // Not while a caller waits on this communicator: that wait drives it.
    bool poll_in_background() override;

    bool test() override;
    void wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) override;
    bool completed() const override;
    void expire(std::chrono::milliseconds waited) override;
    void move_in_background() override;
    const std::string& op_name() const override { return op; }

    std::shared_ptr<Communicator::Impl> comm;
    std::string op;     // "allreduce"
    std::string peers;  // "ranks 0-1", "rank 1": who must take part, for error messages
    ccl::event event;                                 // an operation that oneCCL runs
    std::shared_ptr<detail::ShmCollectives::Op> shm_op;  // or one that runs through shared memory
    std::function<void()> finish;  // runs once when the event completes (avg's division, ...)
    mutable std::mutex mutex;
    bool done = false;
    std::exception_ptr failure;  // raised again by every later test()/wait()
    const std::chrono::steady_clock::time_point issued = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point next_peer_check = issued + std::chrono::milliseconds(200);

    // Keeps `error` as this op's failure (the first one wins) and throws it.
    [[noreturn]] void fail(std::exception_ptr error);
    // The failure for a same-host peer that died, if one did (the communicator is aborted).
    void check_local_peers();

    // ccl::event's destructor waits for the operation; after a timeout it would wait forever.
    ~EngineOperation() override {
        if (!done) new ccl::event(std::move(event));  // deliberately never destroyed
    }
};

}  // namespace detail

}  // namespace ccl_core
