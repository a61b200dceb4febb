// A group of ranks and every collective on raw host buffers (see collectives.hpp), bootstrapped through a store.
#pragma once

#include <ccl_core/collectives.hpp>
#include <ccl_core/communicator_options.hpp>
#include <ccl_core/errors.hpp>
#include <ccl_core/op_args.hpp>
#include <ccl_core/request.hpp>
#include <ccl_core/store.hpp>
#include <ccl_core/types.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ccl_core {

namespace detail {
class ShmCollectives;  // src/shm (private to ccl-core)
}

class Communicator final : public Collectives {
public:
    class Impl;

    // Meets the other ranks through `store` (rank 0 publishes oneCCL's address, every rank announces itself)
    // and creates the oneCCL communicator. Throws Timeout naming the ranks that never arrived.
    static std::shared_ptr<Communicator> create(std::shared_ptr<Store> store, int rank, int size,
                                                const CommunicatorOptions& options = {});
    ~Communicator();

    int rank() const override;
    int size() const override;
    const CommunicatorOptions& options() const;
    // Ranks of this communicator on this host (by hostname and boot id) and whether they outnumber the cores
    // they may run on together (the union of their affinities); waiting then sleeps between polls.
    int local_ranks() const;
    bool oversubscribed() const;
    // True when allreduce, allgather, reduce_scatter and broadcast run through ccl-core's shared-memory path (every
    // rank on this host and none with CCL_CORE_SHM=0, as the group agreed at creation) instead of oneCCL.
    bool shared_memory() const;
    // What the group agreed on that path: "on", or "off: <why>" ("off: rank 1 has CCL_CORE_SHM=0").
    const std::string& shared_memory_status() const;
    // True when allreduce, allgather, reduce_scatter and broadcast of a group that spans hosts, with the same number
    // (>= 2) of ranks on each, go through each host's ranks and then across hosts (src/hierarchy/hierarchy.hpp), for
    // messages from CCL_CORE_HIERARCHY_MIN_BYTES up; hierarchy_status() says "on: 2 hosts x 2 ranks" or why not.
    bool hierarchical() const;
    const std::string& hierarchy_status() const;
    // Registered memory: `bytes` in shared memory that every rank of this group can read in place (the group's ranks
    // share a host and its shared-memory path is on). When every rank's buffers of an allreduce, allgather,
    // reduce_scatter or broadcast lie in such memory, the op reads the peers' buffers directly and moves each byte
    // once (the ranks agree on it per op, from what each says of its buffers). The memory lives as long as the
    // returned pointer, or an op that reads it, does; freed blocks are reused for allocations of the same size.
    // nullptr when the group has no shared-memory path or /dev/shm cannot hold it: use ordinary memory then.
    std::shared_ptr<void> allocate(std::size_t bytes);
    // Whether [p, p + bytes) lies in this group's registered memory (allocate()).
    bool registered(const void* p, std::size_t bytes) const;
    // Ops so far that read their peers' registered buffers in place (the others copied through the shared segment).
    std::uint64_t in_place_ops() const;
    // One-sided access to registered memory (torch's windows). Where [p, p + bytes) lies, as a peer finds it, and a
    // hold that keeps its block from going back to the pool while held. Throws InvalidArgument when it is not there.
    // A block located here is never reused once let go (a peer that writes late must not reach a later allocation).
    struct RegisteredRegion {
        std::uint64_t serial = 0, offset = 0, bytes = 0;
    };
    RegisteredRegion locate_registered(const void* p, std::size_t bytes, std::shared_ptr<void>& hold) const;
    // Rank `rank`'s region (as it located it) mapped here for reading and writing, after the checks every mapping of
    // a peer's memory gets (owner, mode, size); the mapping lives as long as the pointer. BackendError otherwise.
    std::shared_ptr<char> map_registered(int rank, const RegisteredRegion& region) const;
    [[deprecated("shared_memory(): it covers allgather, reduce_scatter and broadcast as well")]]
    bool shared_memory_allreduce() const { return shared_memory(); }
    // Set after a timeout or error: every later call throws CommunicatorAborted.
    bool aborted() const;
    // Aborts on the user's behalf: every op still waiting raises CommunicatorAborted within its next poll (0.2 s at
    // most), and so does every later call.
    void abort(const std::string& reason) override;
    AbortCause abort_cause() const;    // AbortCause::none while usable
    std::string abort_reason() const;  // "" while usable
    // Runs before the communicator aborts on a failure (a timeout, a dead peer, an error), once; see Engine::on_abort.
    void on_abort(std::function<void(AbortCause, const std::string&)> listener);
    // Text appended to the error of an op that timed out or that the ranks called differently: where the other ranks
    // are (see Engine::explain_failures_with).
    void explain_failures_with(std::function<std::string(const std::string& op)> explainer);

    // The collectives of collectives.hpp, on host memory.
    Request allreduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) override;
    Request reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, int root) override;
    Request broadcast(void* buffer, std::size_t count, DType dtype, int root) override;
    Request allgather(const void* send, void* recv, std::size_t count, DType dtype) override;
    Request allgatherv(const void* send, std::size_t send_count, void* recv,
                       const std::vector<std::size_t>& recv_counts, DType dtype) override;
    Request reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op) override;
    Request alltoall(const void* send, void* recv, std::size_t count, DType dtype) override;
    Request alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                      const std::vector<std::size_t>& recv_counts, DType dtype) override;
    Request gather(const void* send, void* recv, std::size_t count, DType dtype, int root) override;
    Request scatter(const void* send, void* recv, std::size_t count, DType dtype, int root) override;
    Request send(const void* buffer, std::size_t count, DType dtype, int peer) override;
    Request recv(void* buffer, std::size_t count, DType dtype, int peer) override;
    Request barrier() override;

    // Communicator over `ranks` (ranks of this communicator, in the order that gives new ranks).
    // Collective over this communicator: every rank calls it; non-members get nullptr.
    std::shared_ptr<Communicator> subgroup(const std::vector<int>& ranks, const std::string& name = "");

private:
    explicit Communicator(std::shared_ptr<Impl> impl);
    // Every collective: checked (validate.hpp), then run on the path the router chooses; `finish` once it is through.
    Request run(const OpArgs& a, std::function<void()> finish = {});
    detail::ShmCollectives* shm() const;
    std::shared_ptr<Impl> impl_;  // shared with requests in flight
};

}  // namespace ccl_core
