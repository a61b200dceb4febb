#include "hierarchy.hpp"

#include "../oneccl/engine_operation.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>

namespace ccl_core::detail {

namespace {

// Below this (per rank) oneCCL's flat path is faster (docs/performance.md, "Across hosts").
constexpr std::size_t kDefaultMinBytes = 256 << 10;

std::string env_or(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return v && *v ? v : fallback;
}

std::size_t parse_bytes(const char* name, const std::string& v) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end || v[0] == '-') throw InvalidArgument(std::string(name) + "=" + v + " is not a number of bytes");
    return static_cast<std::size_t>(n);
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

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

// A hierarchical op: its stages in order, the one in flight, and how it ended.
struct Hierarchy::Chain {
    std::vector<std::function<Request()>> stages;
    std::size_t next = 0;  // the stage to issue next
    Request current;
    bool done = false;
    std::exception_ptr error;
};

namespace {

// A hierarchical op as the group's operation: the group's deadline, abort and dead-peer checks (EngineOperation)
// around its chain.
class ChainOperation final : public EngineOperation {
public:
    ChainOperation(std::shared_ptr<Engine> group, const char* op, std::function<void()> finish,
                   std::shared_ptr<Hierarchy> hierarchy, std::shared_ptr<Hierarchy::Chain> chain)
        : EngineOperation(group, op, group->all_ranks(), std::move(finish)), hierarchy_(std::move(hierarchy)),
          chain_(std::move(chain)) {}

private:
    bool step() override { return hierarchy_->progress(*chain_); }
    const char* failing_layer() const override { return ""; }

    std::shared_ptr<Hierarchy> hierarchy_;
    std::shared_ptr<Hierarchy::Chain> chain_;
};

}  // namespace

// ---- creation -----------------------------------------------------------------------------------------------

std::shared_ptr<Hierarchy> Hierarchy::create(const Engine& group, Milliseconds timeout, std::string& status) {
    const std::vector<int>& host_of = group.host_of_ranks();
    const int hosts = *std::max_element(host_of.begin(), host_of.end()) + 1;
    std::vector<int> per_host(static_cast<std::size_t>(hosts), 0);
    for (int h : host_of) ++per_host[static_cast<std::size_t>(h)];
    if (hosts < 2) {
        status = "off: the group is on one host";
        return nullptr;
    }
    if (std::any_of(per_host.begin(), per_host.end(), [&](int n) { return n != per_host[0]; }) || per_host[0] < 2) {
        std::string counts;
        for (int n : per_host) counts += (counts.empty() ? "" : ", ") + std::to_string(n);
        status = "off: hosts hold " + counts + " ranks (needs the same number, at least 2, on every host)";
        return nullptr;
    }
    // Every rank must take the same path for the same op: the switch and the threshold are agreed here.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto left = [&] {
        return std::max(Milliseconds(0), std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now()));
    };
    PrefixStore agreed("ccl_core/hierarchy", group.store());
    const std::string mine = env_or("CCL_CORE_HIERARCHY", "1");
    const std::string min_bytes = env_or("CCL_CORE_HIERARCHY_MIN_BYTES", std::to_string(kDefaultMinBytes).c_str());
    if (mine != "0" && mine != "1") throw InvalidArgument("CCL_CORE_HIERARCHY=" + mine + ": use 1 (default) or 0");
    (void)parse_bytes("CCL_CORE_HIERARCHY_MIN_BYTES", min_bytes);
    agreed.set(std::to_string(group.rank()), text(mine + " " + min_bytes));
    std::string off;
    std::size_t threshold = 0;
    for (int r = 0; r < group.size(); ++r) {
        const std::string said = text(agreed.get(std::to_string(r), left()));
        const auto space = said.find(' ');
        if (space == std::string::npos || space == 0) throw BackendError("hierarchy: rank " + std::to_string(r) + " sent a malformed setting");
        if (said.substr(0, space) != "1" && off.empty()) off = "off: rank " + std::to_string(r) + " has CCL_CORE_HIERARCHY=0";
        if (r == 0) threshold = parse_bytes("CCL_CORE_HIERARCHY_MIN_BYTES (rank 0's)", said.substr(space + 1));
    }
    if (!off.empty()) {
        status = off;
        return nullptr;
    }

    std::shared_ptr<Hierarchy> h(new Hierarchy());
    h->hosts_ = hosts;
    h->local_size_ = per_host[0];
    h->host_ = host_of[static_cast<std::size_t>(group.rank())];
    h->min_bytes_ = threshold;
    h->rank_at_.assign(static_cast<std::size_t>(hosts * h->local_size_), -1);
    std::vector<int> filled(static_cast<std::size_t>(hosts), 0);
    for (int r = 0; r < group.size(); ++r) {
        const int host = host_of[static_cast<std::size_t>(r)];
        const int index = filled[static_cast<std::size_t>(host)]++;
        h->rank_at_[static_cast<std::size_t>(host * h->local_size_ + index)] = r;
        if (r == group.rank()) h->local_rank_ = index;
    }
    CommunicatorOptions options = group.options();
    const std::string name = options.name;
    options.timeout = std::max(left(), Milliseconds(1));
    options.name = name + "/host" + std::to_string(h->host_);
    h->local_ = Communicator::create(std::make_shared<PrefixStore>("ccl_core/hierarchy/host" + std::to_string(h->host_),
                                                                   group.store()),
                                     h->local_rank_, h->local_size_, options);
    options.timeout = std::max(left(), Milliseconds(1));
    options.name = name + "/across" + std::to_string(h->local_rank_);
    h->cross_ = Communicator::create(std::make_shared<PrefixStore>("ccl_core/hierarchy/across" +
                                                                   std::to_string(h->local_rank_), group.store()),
                                     h->host_, hosts, options);
    status = "on: " + std::to_string(hosts) + " hosts x " + std::to_string(h->local_size_) + " ranks";
    return h;
}

Hierarchy::~Hierarchy() = default;

bool Hierarchy::takes(std::size_t bytes, std::size_t count) const {
    return bytes >= min_bytes_ && count >= static_cast<std::size_t>(local_size_);
}

void Hierarchy::abort(const std::string& reason) {
    local_->abort(reason);
    cross_->abort(reason);
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
    for (auto it = queue_.begin(); it != queue_.end();) {
        Chain& c = **it;
        try {
            for (;;) {
                if (c.current.operation() && !c.current.test()) break;
                if (c.next == c.stages.size()) {
                    c.done = true;
                    break;
                }
                c.current = c.stages[c.next++]();
            }
        } catch (...) {
            c.error = std::current_exception();
            c.done = true;
        }
        if (c.done) {
            it = queue_.erase(it);
            continue;
        }
        if (c.next < c.stages.size()) break;  // later chains issue only once this one has issued its last stage
        ++it;
    }
}

Request Hierarchy::start(const std::shared_ptr<Engine>& group, const char* op, std::shared_ptr<Chain> chain,
                         std::function<void()> finish) {
    group->throw_if_aborted(op);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(chain);
    }
    return Request(std::make_shared<ChainOperation>(group, op, std::move(finish), shared_from_this(), std::move(chain)));
}

// ---- the ops ------------------------------------------------------------------------------------------------

Request Hierarchy::allreduce(const std::shared_ptr<Engine>& group, const void* send, void* recv, std::size_t count,
                             DType dtype, ReduceOp op, std::function<void()> finish) {
    const ReduceOp inner = op == ReduceOp::avg ? ReduceOp::sum : op;
    const std::size_t piece = count / static_cast<std::size_t>(local_size_);
    const std::size_t tail = count - piece * static_cast<std::size_t>(local_size_);
    void* mine = at(recv, piece * static_cast<std::size_t>(local_rank_), dtype);
    auto chain = std::make_shared<Chain>();
    auto local = local_, cross = cross_;
    chain->stages = {
        [=] { return local->reduce_scatter(send, mine, piece, dtype, inner); },
        [=] { return cross->allreduce(mine, mine, piece, dtype, inner); },
        [=] { return local->allgather(mine, recv, piece, dtype); },
    };
    if (tail > 0) {  // the last count % L elements: inside the host, then between hosts
        const void* tail_send = at(send, count - tail, dtype);
        void* tail_recv = at(recv, count - tail, dtype);
        chain->stages.push_back([=] { return local->allreduce(tail_send, tail_recv, tail, dtype, inner); });
        chain->stages.push_back([=] { return cross->allreduce(tail_recv, tail_recv, tail, dtype, inner); });
    }
    return start(group, "allreduce", std::move(chain), std::move(finish));
}

Request Hierarchy::reduce_scatter(const std::shared_ptr<Engine>& group, const void* send, void* recv,
                                  std::size_t recv_count, DType dtype, ReduceOp op, std::function<void()> finish) {
    const ReduceOp inner = op == ReduceOp::avg ? ReduceOp::sum : op;
    const auto H = static_cast<std::size_t>(hosts_), L = static_cast<std::size_t>(local_size_);
    // The blocks regrouped by local index: local rank i reduces, over its host, the blocks of local index i on every
    // host (host order), which it then reduce-scatters with the other hosts.
    Scratch by_index = scratch(L * H * recv_count, dtype);
    const std::size_t block = recv_count * dtype_size(dtype);
    for (std::size_t i = 0; i < L; ++i) {
        for (std::size_t h = 0; h < H; ++h) {
            const auto r = static_cast<std::size_t>(rank_at(static_cast<int>(h), static_cast<int>(i)));
            std::memcpy(by_index->data() + (i * H + h) * block, static_cast<const char*>(send) + r * block, block);
        }
    }
    Scratch host_sum = scratch(H * recv_count, dtype);
    auto chain = std::make_shared<Chain>();
    auto local = local_, cross = cross_;
    chain->stages = {
        [=] { return local->reduce_scatter(by_index->data(), host_sum->data(), H * recv_count, dtype, inner); },
        [=] { return cross->reduce_scatter(host_sum->data(), recv, recv_count, dtype, inner); },
    };
    return start(group, "reduce_scatter", std::move(chain), [by_index, host_sum, finish = std::move(finish)] {
        if (finish) finish();
    });
}

Request Hierarchy::allgather(const std::shared_ptr<Engine>& group, const void* send, void* recv, std::size_t count,
                             DType dtype) {
    const auto H = static_cast<std::size_t>(hosts_), L = static_cast<std::size_t>(local_size_);
    Scratch across = scratch(H * count, dtype);      // this local index's input of every host
    Scratch gathered = scratch(L * H * count, dtype);  // every local index's `across`, in local order
    auto chain = std::make_shared<Chain>();
    auto local = local_, cross = cross_;
    chain->stages = {
        [=] { return cross->allgather(send, across->data(), count, dtype); },
        [=] { return local->allgather(across->data(), gathered->data(), H * count, dtype); },
    };
    const std::size_t block = count * dtype_size(dtype);
    std::vector<int> order = rank_at_;
    return start(group, "allgather", std::move(chain), [=] {
        for (std::size_t i = 0; i < L; ++i) {
            for (std::size_t h = 0; h < H; ++h) {
                const auto r = static_cast<std::size_t>(order[h * L + i]);
                std::memcpy(static_cast<char*>(recv) + r * block, gathered->data() + (i * H + h) * block, block);
            }
        }
    });
}

Request Hierarchy::broadcast(const std::shared_ptr<Engine>& group, void* buffer, std::size_t count, DType dtype,
                             int root) {
    int root_host = 0, root_index = 0;
    for (int h = 0; h < hosts_; ++h) {
        for (int i = 0; i < local_size_; ++i) {
            if (rank_at(h, i) == root) root_host = h, root_index = i;
        }
    }
    auto chain = std::make_shared<Chain>();
    auto local = local_, cross = cross_;
    if (local_rank_ == root_index) {
        chain->stages.push_back([=] { return cross->broadcast(buffer, count, dtype, root_host); });
    }
    chain->stages.push_back([=] { return local->broadcast(buffer, count, dtype, root_index); });
    return start(group, "broadcast", std::move(chain), {});
}

}  // namespace ccl_core::detail
