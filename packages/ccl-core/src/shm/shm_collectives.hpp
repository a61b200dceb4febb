// Allreduce, allgather, reduce_scatter and broadcast through one shared-memory segment, for communicators whose
// ranks all share a host.
//
// oneCCL's own path costs a few microseconds per call even inside a host, and its large-message path moves more
// bytes than the reduction needs. Like DeepSpeed's and vLLM's CPU paths, ranks here copy into a shared segment and
// reduce out of it:
// - small messages (a limit per rank count and dtype): every rank copies its input into its slot; once all have arrived
//   every rank reduces all slots (in rank order, so every rank computes the same bits). One synchronisation per call.
// - large messages, segment by segment: every rank copies the parts the others reduce, reduces its own share of the
//   segment (its input plus the others' slots) into its output and a shared result area, then copies the others'
//   shares of the result. Two synchronisations per segment; the bytes moved stay near the memory floor.
// - allgather, reduce_scatter, broadcast, segment by segment: every rank places what the others need in its slot;
//   once all have arrived, every rank takes (or reduces) what it needs. One synchronisation per segment.
// Slots and result areas alternate between two halves by sequence number, so one call's writes never overlap a
// slower peer's reads of the call before; monotonic counters per rank are the only synchronisation.
//
// Nothing blocks: progress() advances queued operations as far as the peers allow, and Request::test/wait drive it.
// The segment is unlinked as soon as every rank mapped it, so a killed rank leaves nothing in /dev/shm.
#pragma once

#include "../group/local_path.hpp"
#include "registered_pool.hpp"

#include <ccl_core/store.hpp>
#include <ccl_core/types.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ccl_core::detail {

struct RankHeader;  // shm_collectives.cpp: one per rank in the segment

class ShmCollectives final : public LocalPath {
public:
    struct Op;

    // Maps a segment shared by all `size` ranks (all on this host). Collective over the store. Returns nullptr on
    // every rank when shared memory is switched off (CCL_CORE_SHM=0) or when any rank could not map the segment;
    // `agreed` then says why ("rank 1 has CCL_CORE_SHM=0"), else it is "on".
    // `threads`: how many this rank works with (parallel/worker_pool.hpp): the default segment grows with them.
    static std::unique_ptr<ShmCollectives> create(Store& store, int rank, int size, int threads, Milliseconds timeout,
                                                  std::string& agreed);
    ~ShmCollectives() override;

    // The order is part of the segment's layout (ranks describe their ops to each other by it).
    enum class Kind : std::int32_t { allreduce, allgather, reduce_scatter, broadcast };

    // Where the per-rank blocks of an allgather's output (or a reduce_scatter's input) lie when each is not one
    // contiguous run at rank * count: block p is runs of `run` elements, run j at element offsets[p][j] of the buffer.
    // The hierarchical path gathers and scatters this way straight into place (its blocks are spread over the caller's
    // buffer by host), instead of going through a buffer of its own and copying the whole message once more.
    struct Runs {
        std::size_t run = 0;
        std::vector<std::vector<std::size_t>> offsets;  // one list per rank; run count * run == the op's count
    };

    // Queues a collective; ranks must queue the same calls in the same order. avg reduces as sum (the caller divides).
    // count: allreduce and broadcast the buffer, allgather each rank's input, reduce_scatter each rank's output.
    // broadcast reads `send` on the root and writes `recv` elsewhere (the same buffer). `runs`: see Runs (allgather
    // and reduce_scatter only; null for blocks at rank * count).
    std::shared_ptr<Op> start(Kind kind, const void* send, void* recv, std::size_t count, DType dtype,
                              ReduceOp op = ReduceOp::sum, int root = 0, std::shared_ptr<const Runs> runs = nullptr);
    // Whether a segment holds at least one element of `dtype` per piece (reduce_scatter places one piece per rank).
    bool fits(Kind kind, DType dtype) const;
    // Registered memory of this group (registered_pool.hpp): when every rank's buffers of an op lie in it, the op reads
    // the peers' buffers in place instead of copying through the segment (the ranks agree on it per op, from what each
    // describes). nullptr when /dev/shm cannot hold `bytes`.
    std::shared_ptr<RegisteredPool::Block> allocate(std::size_t bytes);
    const RegisteredPool& pool() const { return *pool_; }
    // Peer p's registered block `serial`, mapped here for reading and writing (one-sided windows).
    std::shared_ptr<char> map_peer_block(int p, std::uint64_t serial, std::size_t need) const;
    // Ops that read their peers' buffers in place so far (tests and ccl_core.info tell the paths apart by it).
    std::uint64_t in_place_ops() const { return in_place_ops_.load(std::memory_order_relaxed); }
    // Advances queued operations in order; true once `op` is complete. Throws InvalidArgument when the ranks
    // disagree on count, dtype or reduce op (every rank sees the disagreement).
    bool progress(Op& op);
    // Advances queued operations; waiting on any request of the communicator calls it, because a peer may be
    // waiting for this rank's part of an allreduce while this rank waits for something else.
    void drive() override;
    // Unless ready() (checked after registering as a sleeper, so that nothing published meanwhile is missed), sleeps
    // until any rank publishes progress in the segment, or for at most `limit`. Waiting ranks sleep on a futex
    // instead of spinning, so that a peer sharing the core runs at once (ranks may outnumber cores).
    void sleep_unless(const std::function<bool()>& ready, std::chrono::microseconds limit);
    // True when another rank last published progress from the core this thread runs on. Two ranks on one core
    // must not spin for each other: the one waiting sleeps, so the other gets the core at once.
    bool peer_on_my_core() const override;
    // Records the core this rank runs on (also done at every publish), for peer_on_my_core() of the others.
    void note_my_core() override;

private:
    ShmCollectives(int rank, int size, void* base, std::size_t bytes, std::size_t segment_bytes, std::size_t small_limit,
                   std::size_t small_limit_bf16);
    // The segment an op is at: its sequence number, which half of the slots it uses, its first element and length.
    struct Piece {
        std::uint64_t seq;
        int half;
        std::size_t first, n;
    };
    Piece piece_of(const Op& op) const;
    // Describes the op (and its registered buffers) to the others, before anything is placed.
    void announce(Op& op);
    // True once every rank described the op, and alike; throws InvalidArgument (naming both sides) when they differ.
    bool agree(Op& op) const;
    // Whether this rank's buffers allow the op in place, and whether every rank's (from their descriptions) do.
    bool in_place_here(const Op& op) const;
    bool in_place_everywhere(const Op& op) const;
    // The op, reading the peers' registered buffers directly (no slots); true once every rank is done with it.
    bool advance_in_place(Op& op);
    // Peer p's registered buffer (its send or recv, as described for `op`), mapped here, readable for `bytes`.
    const char* peer_buffer(const Op& op, int p, bool send, std::size_t bytes);
    // Peer p's registered output for `op`, mapped here writable for `bytes` (allreduce in place stores into it).
    char* peer_output(const Op& op, int p, std::size_t bytes);
    void arrive(std::uint64_t seq);
    bool everyone_reached(std::uint64_t RankHeader::*counter, std::uint64_t seq) const;
    void advance_queue();
    bool advance(Op& op);
    bool advance_placed(Op& op);
    bool advance_copied_allreduce(Op& op);
    void check_agreement(const Op& op, std::uint64_t seq) const;
    char* slot(int half, int rank) const;
    char* result(int half) const;
    struct RankHeader* header(int rank) const;
    struct SegmentHeader* segment_header() const;
    void publish(std::uint64_t& counter, std::uint64_t seq);

    int rank_;
    int size_;
    char* base_;
    std::size_t bytes_;
    std::size_t segment_bytes_;  // per slot: the largest piece of a message moved per synchronisation
    std::size_t small_limit_;    // messages up to this size take the one-synchronisation path
    std::size_t small_limit_bf16_;  // the same for bfloat16 (its reduction costs more per byte)
    std::uint64_t next_seq_ = 1;
    mutable std::mutex mutex_;
    std::deque<std::shared_ptr<Op>> queue_;
    std::atomic<std::size_t> pending_{0};
    std::shared_ptr<RegisteredPool> pool_;
    std::atomic<std::uint64_t> in_place_ops_{0};
};

}  // namespace ccl_core::detail
