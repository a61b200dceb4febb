#include "hierarchy.hpp"

#include "../group/group_operation.hpp"
#include "../settings.hpp"
#include "../store/store_text.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>

namespace ccl_core::detail {

namespace {

// Below this (per rank) oneCCL's flat path is faster (docs/performance.md, "Across hosts").
constexpr std::size_t kDefaultMinBytes = 256 << 10;
// Pieces that cross the link while the next one is reduced inside the host (docs/performance.md, "Across hosts").
constexpr std::size_t kDefaultPieceBytes = 4 << 20;

char* at(void* p, std::size_t elements, DType dtype) { return static_cast<char*>(p) + elements * dtype_size(dtype); }
const char* at(const void* p, std::size_t elements, DType dtype) {
    return static_cast<const char*>(p) + elements * dtype_size(dtype);
}

// A buffer of ours that a chain's stages share, kept alive by each stage that uses it.
using Scratch = std::shared_ptr<std::vector<char>>;
Scratch scratch(std::size_t elements, DType dtype) {
    return std::make_shared<std::vector<char>>(elements * dtype_size(dtype));
}

}  // namespace

// A hierarchical op: its pieces (lanes), each a sequence of stages on the inner communicators. Lanes move side by
// side, so that one piece crosses the link while the next is reduced inside the host.
struct Hierarchy::Chain {
    enum Inner { local = 0, cross = 1 };
    struct Stage {
        Inner on;
        std::function<Request()> issue;
    };
    struct Lane {
        std::vector<Stage> stages;
        std::size_t next = 0;  // the stage to issue next
        Request current;       // the stage in flight, if any
    };
    std::vector<Lane> lanes;
    // Per inner communicator, the order in which this op issues its stages there: by stage index, then lane. Every
    // rank follows it, and a later op issues nothing on a communicator before this one has issued all of its stages
    // there, so that each inner communicator sees the same sequence of ops on every rank.
    std::vector<std::pair<std::size_t, std::size_t>> order[2];
    std::size_t issued[2] = {0, 0};
    bool done = false;
    std::exception_ptr error;

    void add_lane(std::vector<Stage> stages) { lanes.push_back(Lane{std::move(stages)}); }
    void seal() {
        std::size_t longest = 0;
        for (const Lane& l : lanes) longest = std::max(longest, l.stages.size());
        for (std::size_t s = 0; s < longest; ++s) {
            for (std::size_t l = 0; l < lanes.size(); ++l) {
                if (s < lanes[l].stages.size()) order[lanes[l].stages[s].on].push_back({l, s});
            }
        }
    }
    bool through() const {
        for (const Lane& l : lanes) {
            if (l.next < l.stages.size() || l.current.operation()) return false;
        }
        return true;
    }
};

namespace {

// A hierarchical op as the group's operation: the group's deadline, abort and dead-peer checks (GroupOperation)
// around its chain.
class ChainOperation final : public GroupOperation {
public:
    ChainOperation(std::shared_ptr<Group> group, const char* op, std::function<void()> finish,
                   std::shared_ptr<Hierarchy> hierarchy, std::shared_ptr<Hierarchy::Chain> chain)
        : GroupOperation(group, op, group->all_ranks(), std::move(finish)), hierarchy_(std::move(hierarchy)),
          chain_(std::move(chain)) {}

private:
    bool step() override { return hierarchy_->progress(*chain_); }
    const char* failing_layer() const override { return ""; }

    std::shared_ptr<Hierarchy> hierarchy_;
    std::shared_ptr<Hierarchy::Chain> chain_;
};

}  // namespace

// ---- creation -----------------------------------------------------------------------------------------------

namespace {

// What every rank of a group that spans hosts agreed on, so that all take the same path for the same op: the switch
// (off when any rank has CCL_CORE_HIERARCHY=0: `off` says which) and rank 0's sizes.
struct Agreed {
    std::string off;
    std::size_t min_bytes = 0, piece_bytes = 0;
};

Agreed agree_on_settings(const Group& group, Milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto left = [&] {
        return std::max(Milliseconds(0), std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now()));
    };
    PrefixStore exchange("ccl_core/hierarchy", group.store());
    const std::string mine = setting_on("CCL_CORE_HIERARCHY") ? "1" : "0";
    const std::string min_bytes = std::to_string(setting_bytes("CCL_CORE_HIERARCHY_MIN_BYTES", kDefaultMinBytes));
    const std::string piece_bytes = std::to_string(setting_bytes("CCL_CORE_HIERARCHY_PIECE_BYTES", kDefaultPieceBytes));
    exchange.set(std::to_string(group.rank()), text(mine + " " + min_bytes + " " + piece_bytes));
    Agreed agreed;
    for (int r = 0; r < group.size(); ++r) {
        // "<switch> <min bytes> <piece bytes>", from a peer: checked, not trusted
        std::istringstream said(text(exchange.get(std::to_string(r), left())));
        std::string on, min_text, piece_text, extra;
        if (!(said >> on >> min_text >> piece_text) || (said >> extra)) {
            throw BackendError("hierarchy: rank " + std::to_string(r) + " sent a malformed setting");
        }
        if (on != "1" && agreed.off.empty()) agreed.off = "off: rank " + std::to_string(r) + " has CCL_CORE_HIERARCHY=0";
        if (r == 0) {
            agreed.min_bytes = parse_bytes("CCL_CORE_HIERARCHY_MIN_BYTES (rank 0's)", min_text);
            agreed.piece_bytes =
                std::max<std::size_t>(1, parse_bytes("CCL_CORE_HIERARCHY_PIECE_BYTES (rank 0's)", piece_text));
        }
    }
    return agreed;
}

}  // namespace

std::shared_ptr<Hierarchy> Hierarchy::create(std::shared_ptr<Group> whole, Milliseconds timeout, std::string& status) {
    const Group& group = *whole;
    const std::vector<int>& host_of = group.host_of_ranks();
    const int hosts = *std::max_element(host_of.begin(), host_of.end()) + 1;
    std::vector<int> per_host(static_cast<std::size_t>(hosts), 0);
    for (int h : host_of) ++per_host[static_cast<std::size_t>(h)];
    if (hosts < 2) {
        status = "off: the group is on one host";
        return nullptr;
    }
    std::string counts;
    for (int n : per_host) counts += (counts.empty() ? "" : ", ") + std::to_string(n);
    const bool equal = std::all_of(per_host.begin(), per_host.end(), [&](int n) { return n == per_host[0]; });
    if (equal && per_host[0] < 2) {
        status = "off: hosts hold " + counts + " ranks (one per host: the flat path crosses the link once already)";
        return nullptr;
    }
    const Agreed agreed = agree_on_settings(group, timeout);
    if (!agreed.off.empty()) {
        status = agreed.off;
        return nullptr;
    }

    std::shared_ptr<Hierarchy> h(new Hierarchy());
    h->group_ = whole;
    h->hosts_ = hosts;
    h->leaders_ = !equal;
    h->host_ = host_of[static_cast<std::size_t>(group.rank())];
    h->local_size_ = per_host[static_cast<std::size_t>(h->host_)];
    h->min_bytes_ = agreed.min_bytes;
    h->piece_bytes_ = agreed.piece_bytes;
    std::vector<int> filled(static_cast<std::size_t>(hosts), 0);
    if (!h->leaders_) h->rank_at_.assign(static_cast<std::size_t>(hosts * h->local_size_), -1);
    for (int r = 0; r < group.size(); ++r) {
        const int host = host_of[static_cast<std::size_t>(r)];
        const int index = filled[static_cast<std::size_t>(host)]++;
        if (!h->leaders_) h->rank_at_[static_cast<std::size_t>(host * h->local_size_ + index)] = r;
        if (r == group.rank()) h->local_rank_ = index;
    }
    // the group's timeout, not what is left of its bootstrap: it is also the bound on each inner op, and an inner
    // op, issued after the group's op, must not run out of time before it (whose error names the whole group)
    CommunicatorOptions options = group.options();
    const std::string name = options.name;
    auto inner = [&](const std::string& key, int rank, int size) {
        options.name = name + "/" + key;
        auto store = std::make_shared<PrefixStore>("ccl_core/hierarchy/" + key, group.store());
        std::string shm_status;
        return FlatCollectives::create(Group::join(std::move(store), rank, size, options), options.timeout, shm_status);
    };
    if (h->local_size_ > 1) h->local_ = inner("host" + std::to_string(h->host_), h->local_rank_, h->local_size_);
    if (!h->leaders_ || h->local_rank_ == 0) h->cross_ = inner("across" + std::to_string(h->local_rank_), h->host_, hosts);
    status = h->leaders_ ? "on: hosts of " + counts + " ranks, allreduce through a leader per host"
                         : "on: " + std::to_string(hosts) + " hosts x " + std::to_string(h->local_size_) + " ranks";
    return h;
}

Hierarchy::~Hierarchy() = default;

void Hierarchy::abort(const std::string& reason) {
    if (local_) local_->group()->abort(reason);
    if (cross_) cross_->group()->abort(reason);
}

// ---- moving chains ------------------------------------------------------------------------------------------

void Hierarchy::drive() {
    std::lock_guard<std::mutex> lock(mutex_);
    advance_queue();
}

bool Hierarchy::progress(Chain& chain) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        advance_queue();
    }
    if (chain.error) std::rethrow_exception(chain.error);
    return chain.done;
}

void Hierarchy::advance_queue() {
    bool blocked[2] = {false, false};  // an earlier op has stages left to issue on this inner communicator
    for (auto it = queue_.begin(); it != queue_.end();) {
        Chain& c = **it;
        try {
            for (bool moved = true; moved;) {
                moved = false;
                for (Chain::Lane& lane : c.lanes) {
                    if (lane.current.operation() && lane.current.test()) {
                        lane.current = Request();
                        moved = true;
                    }
                }
                for (int k = 0; k < 2; ++k) {
                    while (!blocked[k] && c.issued[k] < c.order[k].size()) {
                        const auto [l, s] = c.order[k][c.issued[k]];
                        Chain::Lane& lane = c.lanes[l];
                        if (lane.next != s || lane.current.operation()) break;  // its previous stage is not through
                        lane.current = lane.stages[s].issue();
                        ++lane.next;
                        ++c.issued[k];
                        moved = true;
                    }
                }
            }
            c.done = c.through();
        } catch (...) {
            c.error = std::current_exception();
            c.done = true;
            abort("a hierarchical op failed");  // its stages still in flight fail at once instead of at their deadline
        }
        for (int k = 0; k < 2; ++k) blocked[k] = blocked[k] || (!c.done && c.issued[k] < c.order[k].size());
        it = c.done ? queue_.erase(it) : std::next(it);
    }
}

Request Hierarchy::start(const char* op, std::shared_ptr<Chain> chain, std::function<void()> finish) {
    group_->throw_if_aborted(op);
    chain->seal();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(chain);
    }
    return Request(std::make_shared<ChainOperation>(group_, op, std::move(finish), shared_from_this(), std::move(chain)));
}

// ---- the ops ------------------------------------------------------------------------------------------------

std::vector<Hierarchy::Piece> Hierarchy::pieces(std::size_t count, std::size_t multiple, DType dtype) const {
    const std::size_t units = count / multiple;  // the pieces hold whole multiples; the caller handles the rest
    const std::size_t bytes = count * dtype_size(dtype);
    const std::size_t wanted = std::clamp<std::size_t>((bytes + piece_bytes_ - 1) / std::max<std::size_t>(piece_bytes_, 1), 1, kMaxPieces);
    const std::size_t n = std::max<std::size_t>(1, std::min(wanted, units));
    std::vector<Piece> out;
    for (std::size_t i = 0, first = 0; i < n; ++i) {
        const std::size_t take = (units / n + (i < units % n ? 1 : 0)) * multiple;
        out.push_back({first, take});
        first += take;
    }
    return out;
}

namespace {

// The stages' ops on the inner groups (a host's ranks, or one local index per host), as their flat collectives run
// them. `runs` (shared memory only): where the blocks lie in the caller's buffer.
Request allreduce_on(FlatCollectives& on, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) {
    return on.run({OpKind::allreduce, send, recv, count, dtype, op});
}
Request reduce_scatter_on(FlatCollectives& on, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                          std::shared_ptr<const ShmCollectives::Runs> runs = nullptr) {
    const OpArgs a{OpKind::reduce_scatter, send, recv, count, dtype, op};
    return runs ? on.run(a, Path::shared_memory, {}, std::move(runs)) : on.run(a);
}
Request allgather_on(FlatCollectives& on, const void* send, void* recv, std::size_t count, DType dtype,
                     std::shared_ptr<const ShmCollectives::Runs> runs = nullptr) {
    const std::vector<std::size_t> counts(static_cast<std::size_t>(on.group()->size()), count);
    OpArgs a{OpKind::allgatherv, send, recv, count, dtype};
    a.recv_counts = &counts;  // read while the op is issued, within run()
    return runs ? on.run(a, Path::shared_memory, {}, std::move(runs)) : on.run(a);
}
Request broadcast_on(FlatCollectives& on, void* buffer, std::size_t count, DType dtype, int root) {
    OpArgs a{OpKind::broadcast, buffer, buffer, count, dtype};
    a.root = root;
    return on.run(a);
}

}  // namespace

Request Hierarchy::run(const OpArgs& a, std::function<void()> finish) {
    if (leaders_) {
        if (a.kind != OpKind::allreduce) {  // the router sends only allreduce here (GroupPaths)
            throw Unsupported(std::string(op_name(a.kind)) + " has no hierarchical form on hosts of unequal rank counts");
        }
        return allreduce_through_leaders(a, std::move(finish));
    }
    switch (a.kind) {
        case OpKind::allreduce: return allreduce(a, std::move(finish));
        case OpKind::reduce_scatter: return reduce_scatter(a, std::move(finish));
        case OpKind::allgatherv: return allgather(a);
        case OpKind::broadcast: return broadcast(a);
        default: throw Unsupported(std::string(op_name(a.kind)) + " has no hierarchical form");
    }
}

Request Hierarchy::allreduce(const OpArgs& a, std::function<void()> finish) {
    const void* send = a.send;
    void* recv = a.recv;
    const std::size_t count = a.count;
    const DType dtype = a.dtype;
    const ReduceOp op = a.op;
    const ReduceOp inner = op == ReduceOp::avg ? ReduceOp::sum : op;
    const auto L = static_cast<std::size_t>(local_size_), me = static_cast<std::size_t>(local_rank_);
    auto chain = std::make_shared<Chain>();
    auto local = local_, cross = cross_;
    std::size_t covered = 0;
    for (const Piece& p : pieces(count, L, dtype)) {
        // local rank i reduces share i of the piece over its host, then with the other hosts, then shares it
        const std::size_t share = p.n / L;
        const void* in = at(send, p.first, dtype);
        void* out = at(recv, p.first, dtype);
        void* mine = at(recv, p.first + share * me, dtype);
        chain->add_lane({{Chain::local, [=] { return reduce_scatter_on(*local, in, mine, share, dtype, inner); }},
                         {Chain::cross, [=] { return allreduce_on(*cross, mine, mine, share, dtype, inner); }},
                         {Chain::local, [=] { return allgather_on(*local, mine, out, share, dtype); }}});
        covered = p.first + p.n;
    }
    if (const std::size_t tail = count - covered; tail > 0) {  // fewer than L elements: inside the host, then across
        const void* in = at(send, covered, dtype);
        void* out = at(recv, covered, dtype);
        chain->add_lane({{Chain::local, [=] { return allreduce_on(*local, in, out, tail, dtype, inner); }},
                         {Chain::cross, [=] { return allreduce_on(*cross, out, out, tail, dtype, inner); }}});
    }
    return start("allreduce", std::move(chain), std::move(finish));
}

// Hosts of unequal rank counts, per piece: the host's sum on every rank of it (the leader's is what counts), the
// leaders' allreduce of it across hosts, the leader's result to the rest of its host. A host of one rank is its own
// leader with no stage inside. On the inner communicator of a host every rank issues the same sequence: the pieces'
// allreduces, then their broadcasts.
Request Hierarchy::allreduce_through_leaders(const OpArgs& a, std::function<void()> finish) {
    const DType dtype = a.dtype;
    const ReduceOp inner = a.op == ReduceOp::avg ? ReduceOp::sum : a.op;
    auto chain = std::make_shared<Chain>();
    auto local = local_, cross = cross_;
    for (const Piece& p : pieces(a.count, 1, dtype)) {
        const void* in = at(a.send, p.first, dtype);
        void* out = at(a.recv, p.first, dtype);
        const std::size_t n = p.n;
        std::vector<Chain::Stage> stages;
        if (local) stages.push_back({Chain::local, [=] { return allreduce_on(*local, in, out, n, dtype, inner); }});
        if (cross) {
            const void* from = local ? out : in;
            stages.push_back({Chain::cross, [=] { return allreduce_on(*cross, from, out, n, dtype, inner); }});
        }
        if (local) stages.push_back({Chain::local, [=] { return broadcast_on(*local, out, n, dtype, 0); }});
        chain->add_lane(std::move(stages));
    }
    return start("allreduce", std::move(chain), std::move(finish));
}

// Where the pieces of the blocks that local rank i handles lie in the caller's buffer: the blocks of local index i on
// every host (host order), each block `block` elements long, piece [first, first + n) of each.
std::shared_ptr<const ShmCollectives::Runs> Hierarchy::runs_of_local_indices(std::size_t block, std::size_t first,
                                                                          std::size_t n) const {
    auto runs = std::make_shared<ShmCollectives::Runs>();
    runs->run = n;
    for (int i = 0; i < local_size_; ++i) {
        std::vector<std::size_t> offsets;
        for (int h = 0; h < hosts_; ++h) offsets.push_back(static_cast<std::size_t>(rank_at(h, i)) * block + first);
        runs->offsets.push_back(std::move(offsets));
    }
    return runs;
}

Request Hierarchy::reduce_scatter(const OpArgs& a, std::function<void()> finish) {
    const void* send = a.send;
    void* recv = a.recv;
    const std::size_t recv_count = a.count;
    const DType dtype = a.dtype;
    const ReduceOp op = a.op;
    const ReduceOp inner = op == ReduceOp::avg ? ReduceOp::sum : op;
    const auto H = static_cast<std::size_t>(hosts_), L = static_cast<std::size_t>(local_size_);
    const std::size_t e = dtype_size(dtype);
    // Piece [first, first + n) of every block, by local index: local rank i reduces, over its host, that piece of the
    // blocks of local index i on every host (host order), then reduce-scatters it with the other hosts. The
    // shared-memory path reads those pieces where they lie; without it they are regrouped into a buffer first.
    const bool by_runs = local_->shm() != nullptr;
    const std::vector<Piece> parts = pieces(recv_count, 1, dtype);
    Scratch by_index = by_runs ? nullptr : scratch(L * H * recv_count, dtype);
    Scratch host_sum = scratch(H * recv_count, dtype);
    auto chain = std::make_shared<Chain>();
    auto local = local_, cross = cross_;
    for (const Piece& p : parts) {
        char* summed = host_sum->data() + H * p.first * e;
        void* out = at(recv, p.first, dtype);
        const std::size_t n = p.n;
        std::function<Request()> inside;
        if (by_runs) {
            auto runs = runs_of_local_indices(recv_count, p.first, n);
            inside = [=] { return reduce_scatter_on(*local, send, summed, H * n, dtype, inner, runs); };
        } else {
            char* regrouped = by_index->data() + L * H * p.first * e;  // this piece's L x H blocks of p.n elements
            for (std::size_t i = 0; i < L; ++i) {
                for (std::size_t h = 0; h < H; ++h) {
                    const auto r = static_cast<std::size_t>(rank_at(static_cast<int>(h), static_cast<int>(i)));
                    std::memcpy(regrouped + (i * H + h) * n * e,
                                static_cast<const char*>(send) + (r * recv_count + p.first) * e, n * e);
                }
            }
            inside = [=] { return reduce_scatter_on(*local, regrouped, summed, H * n, dtype, inner); };
        }
        chain->add_lane({{Chain::local, inside},
                         {Chain::cross, [=] { return reduce_scatter_on(*cross, summed, out, n, dtype, inner); }}});
    }
    return start("reduce_scatter", std::move(chain), [by_index, host_sum, finish = std::move(finish)] {
        if (finish) finish();
    });
}

Request Hierarchy::allgather(const OpArgs& a) {
    const void* send = a.send;
    void* recv = a.recv;
    const std::size_t count = a.count;
    const DType dtype = a.dtype;
    const auto H = static_cast<std::size_t>(hosts_), L = static_cast<std::size_t>(local_size_);
    const std::size_t e = dtype_size(dtype);
    // Across hosts first (each local index gathers its own input of every host), then inside the host: the
    // shared-memory path writes each host's block of each local index straight to its place in the output; without
    // it the host's gather lands in a buffer, reordered into rank order at the end.
    const bool by_runs = local_->shm() != nullptr;
    const std::vector<Piece> parts = pieces(count, 1, dtype);
    Scratch across = scratch(H * count, dtype);        // per piece: this local index's input of every host
    Scratch gathered = by_runs ? nullptr : scratch(L * H * count, dtype);  // per piece: every local index's `across`
    auto chain = std::make_shared<Chain>();
    auto local = local_, cross = cross_;
    for (const Piece& p : parts) {
        const void* in = at(send, p.first, dtype);
        char* gathered_across = across->data() + H * p.first * e;
        const std::size_t n = p.n;
        std::function<Request()> inside;
        if (by_runs) {
            auto runs = runs_of_local_indices(count, p.first, n);
            inside = [=] { return allgather_on(*local, gathered_across, recv, H * n, dtype, runs); };
        } else {
            char* g = gathered->data() + L * H * p.first * e;
            inside = [=] { return allgather_on(*local, gathered_across, g, H * n, dtype); };
        }
        chain->add_lane({{Chain::cross, [=] { return allgather_on(*cross, in, gathered_across, n, dtype); }},
                         {Chain::local, inside}});
    }
    if (by_runs) return start("allgather", std::move(chain), [across] {});  // the stages use it
    std::vector<int> order = rank_at_;
    return start("allgather", std::move(chain), [=, keep = across] {
        for (const Piece& p : parts) {
            const char* g = gathered->data() + L * H * p.first * e;
            for (std::size_t i = 0; i < L; ++i) {
                for (std::size_t h = 0; h < H; ++h) {
                    const auto r = static_cast<std::size_t>(order[h * L + i]);
                    std::memcpy(static_cast<char*>(recv) + (r * count + p.first) * e, g + (i * H + h) * p.n * e, p.n * e);
                }
            }
        }
    });
}

Request Hierarchy::broadcast(const OpArgs& a) {
    void* buffer = a.recv;
    const std::size_t count = a.count;
    const DType dtype = a.dtype;
    const int root = a.root;
    int root_host = 0, root_index = 0;
    for (int h = 0; h < hosts_; ++h) {
        for (int i = 0; i < local_size_; ++i) {
            if (rank_at(h, i) == root) root_host = h, root_index = i;
        }
    }
    auto chain = std::make_shared<Chain>();
    auto local = local_, cross = cross_;
    for (const Piece& p : pieces(count, 1, dtype)) {
        void* piece = at(buffer, p.first, dtype);
        const std::size_t n = p.n;
        std::vector<Chain::Stage> stages;
        if (local_rank_ == root_index) {  // the root's local index carries it between hosts
            stages.push_back({Chain::cross, [=] { return broadcast_on(*cross, piece, n, dtype, root_host); }});
        }
        stages.push_back({Chain::local, [=] { return broadcast_on(*local, piece, n, dtype, root_index); }});
        chain->add_lane(std::move(stages));
    }
    return start("broadcast", std::move(chain), {});
}

}  // namespace ccl_core::detail
