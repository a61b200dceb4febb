// Collectives of a group that spans hosts with several ranks on each: inside a host through a communicator of that
// host's ranks (the shared-memory path), between hosts through one oneCCL communicator per local index (the ranks
// that hold the same place on every host), so that each byte crosses the link as few times as the op allows.
//
// On a cluster the link between hosts is the bottleneck: a host's memory moves tens of GB/s, its NIC a few. oneCCL's
// flat algorithms treat every rank alike, so a ring over 2 hosts x L ranks carries a message over the link more often
// than needed. Here, with H hosts of L ranks and a message of N bytes:
// - allreduce: reduce_scatter inside the host (rank i holds the host's sum of piece i, N/L bytes), allreduce of that
//   piece between hosts (L communicators side by side, each N/L), allgather inside the host;
// - reduce_scatter: reduce_scatter inside the host of the blocks each local index owns on every host, then
//   reduce_scatter of those between hosts;
// - allgather: allgather between hosts (each local index its own input), then inside the host;
// - broadcast: between hosts among the root's local index, then inside each host.
// Every rank of a host then sends over the link only its own share of what the host must send.
// Hosts of unequal rank counts (1 and 3, say) have no local index on every host; there allreduce goes through one
// leader per host (local rank 0): allreduce inside the host, allreduce of the whole piece among the leaders,
// broadcast inside the host. A host's link carries the same bytes either way; only the streams are fewer. Their other
// ops keep oneCCL's flat algorithms, and so do groups of one rank per host (flat is already one crossing).
//
// An op is cut into pieces, each a chain of stages on the two inner communicators (a stage is issued when the
// piece's previous one completes), so that one piece crosses the link while the next is reduced inside the host.
// oneCCL and the shared-memory path match ops by their order on every rank: each op issues its stages on an inner
// communicator in a fixed order, and only once every earlier op has issued all of its own there.
#pragma once

#include "../group/local_path.hpp"
#include "../routing/flat_collectives.hpp"

#include <ccl_core/group.hpp>
#include <ccl_core/op_args.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ccl_core::detail {

class Hierarchy final : public LocalPath, public std::enable_shared_from_this<Hierarchy> {
public:
    // Collective over the group's store. nullptr when the group does not span hosts with at least 2 ranks on one of
    // them, or when any rank has CCL_CORE_HIERARCHY=0; `status` says which ("on: 2 hosts x 2 ranks", "on: hosts of 2,
    // 1 ranks, allreduce through a leader per host", "off: hosts hold 1, 1 ranks").
    static std::shared_ptr<Hierarchy> create(std::shared_ptr<Group> group, Milliseconds timeout, std::string& status);
    ~Hierarchy() override;

    // What the router needs to know: ops below CCL_CORE_HIERARCHY_MIN_BYTES per rank (rank 0's, agreed at creation)
    // go oneCCL's flat way, which is faster there (one latency instead of three), and so do ops of fewer elements than
    // a host has ranks.
    std::size_t min_bytes() const { return min_bytes_; }
    std::size_t min_count() const { return leaders_ ? 1 : static_cast<std::size_t>(local_size_); }
    // Hosts of unequal rank counts: only allreduce is hierarchical, through one leader per host.
    bool through_leaders() const { return leaders_; }

    // An allreduce, reduce_scatter, allgather (of even counts) or broadcast of the group; `finish` runs once the op
    // is through (avg's division). Sums stand for avg (the caller divides).
    Request run(const OpArgs& a, std::function<void()> finish);

    // Aborts the inner communicators (their destructors would otherwise wait for peers that may be gone).
    void abort(const std::string& reason);

    // LocalPath: a wait on any other op of the group moves the chains too (a peer may wait for this rank's stage).
    void drive() override;
    void note_my_core() override {}
    bool peer_on_my_core() const override { return false; }

    struct Chain;
    // Advances every queued chain as far as the order allows; true once `chain` is through. Raises its failure.
    bool progress(Chain& chain);

private:
    Hierarchy() = default;
    // An op is cut into pieces of about CCL_CORE_HIERARCHY_PIECE_BYTES (rank 0's), each a whole number of `multiple`
    // elements (at most kMaxPieces; the elements beyond the last whole multiple are the caller's).
    struct Piece {
        std::size_t first, n;
    };
    static constexpr std::size_t kMaxPieces = 64;
    std::vector<Piece> pieces(std::size_t count, std::size_t multiple, DType dtype) const;
    Request allreduce(const OpArgs& a, std::function<void()> finish);
    Request allreduce_through_leaders(const OpArgs& a, std::function<void()> finish);
    Request reduce_scatter(const OpArgs& a, std::function<void()> finish);
    Request allgather(const OpArgs& a);
    Request broadcast(const OpArgs& a);
    Request start(const char* op, std::shared_ptr<Chain> chain, std::function<void()> finish);
    void advance_queue();
    // The runs (ShmCollectives::Runs) of local rank i's blocks: piece [first, first + n) of the block of
    // rank_at(h, i) for every host h, blocks of `block` elements at rank * block of the caller's buffer.
    std::shared_ptr<const ShmCollectives::Runs> runs_of_local_indices(std::size_t block, std::size_t first,
                                                                      std::size_t n) const;
    int rank_at(int host, int local_rank) const {
        return rank_at_[static_cast<std::size_t>(host * local_size_ + local_rank)];
    }

    std::shared_ptr<Group> group_;  // the whole group
    std::shared_ptr<FlatCollectives> local_;  // this host's ranks (null for a host of one rank)
    std::shared_ptr<FlatCollectives> cross_;  // this local index on every host (with leaders_: null but on leaders)
    int hosts_ = 0, host_ = 0, local_size_ = 0, local_rank_ = 0;
    bool leaders_ = false;  // hosts of unequal rank counts (local_size_ is then this host's)
    std::vector<int> rank_at_;  // group rank of (host, local rank), at host * local_size_ + local rank
    std::size_t min_bytes_ = 0;
    std::size_t piece_bytes_ = 0;
    std::mutex mutex_;
    std::deque<std::shared_ptr<Chain>> queue_;
};

}  // namespace ccl_core::detail
