// The host communicator: every collective on host memory, through the shared-memory path when every rank shares this
// host, else through the oneCCL engine (engine.hpp).
#include "communicator_impl.hpp"
#include "kernels/elementwise.hpp"

#include <algorithm>
#include <numeric>

namespace ccl_core {
namespace {

// A valid address for buffers that carry zero elements (gather/scatter through alltoallv).
void* scratch() {
    static thread_local char byte;
    return &byte;
}

}  // namespace

// ---- bootstrap ---------------------------------------------------------------------------------------------

std::shared_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank, int size,
                                                   const CommunicatorOptions& options) {
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    auto impl = std::make_shared<Impl>();
    impl->engine = Engine::create(std::move(store), rank, size, options);
    Engine& engine = *impl->engine;
    // what is left of the bootstrap's time for the path the group sets up next
    const auto left = std::max(Milliseconds(0), std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now()));
    if (engine.local_ranks() == size) {
        impl->shm = detail::ShmCollectives::create(*std::make_shared<PrefixStore>("ccl_core/shm", engine.store()), rank,
                                                   size, left, impl->shm_status);
        engine.lend_local_path(impl->shm);
    } else {  // spans hosts
        impl->hierarchy = detail::Hierarchy::create(engine, left, impl->hierarchy_status);
        if (impl->hierarchy) engine.lend_local_path(impl->hierarchy);
    }
    return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

Communicator::Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->engine->rank(); }
int Communicator::size() const { return impl_->engine->size(); }
const CommunicatorOptions& Communicator::options() const { return impl_->engine->options(); }
bool Communicator::aborted() const { return impl_->engine->aborted(); }
int Communicator::local_ranks() const { return impl_->engine->local_ranks(); }
bool Communicator::oversubscribed() const { return impl_->engine->oversubscribed(); }
bool Communicator::shared_memory() const { return impl_->shm != nullptr; }
const std::string& Communicator::shared_memory_status() const { return impl_->shm_status; }
bool Communicator::hierarchical() const { return impl_->hierarchy != nullptr; }
const std::string& Communicator::hierarchy_status() const { return impl_->hierarchy_status; }
void Communicator::abort(const std::string& reason) {
    impl_->engine->abort(reason, AbortCause::by_user);
    if (impl_->hierarchy) impl_->hierarchy->abort(reason);
}
std::shared_ptr<void> Communicator::allocate(std::size_t bytes) {
    if (!impl_->shm) return nullptr;
    auto block = impl_->shm->allocate(bytes);
    if (!block) return nullptr;
    char* data = block->data;
    return std::shared_ptr<void>(std::move(block), data);
}
bool Communicator::registered(const void* p, std::size_t bytes) const {
    detail::RegisteredPool::Where where;
    return impl_->shm && impl_->shm->pool().find(p, bytes, where) != nullptr;
}
Communicator::RegisteredRegion Communicator::locate_registered(const void* p, std::size_t bytes,
                                                               std::shared_ptr<void>& hold) const {
    detail::RegisteredPool::Where where;
    auto block = impl_->shm ? impl_->shm->pool().find(p, bytes, where) : nullptr;
    if (!block) {
        throw InvalidArgument("the buffer does not lie in this group's registered memory (allocate it from the group: "
                              "Communicator::allocate, torch's allocate_tensor)");
    }
    block->peers_write = true;  // the region is located to be handed to peers that map it writable
    hold = block;
    return {where.serial, where.offset, bytes};
}
std::shared_ptr<char> Communicator::map_registered(int rank, const RegisteredRegion& region) const {
    if (!impl_->shm) throw Unsupported("registered memory needs the shared-memory path (every rank on one host)");
    if (rank < 0 || rank >= size()) {
        throw InvalidArgument("rank " + std::to_string(rank) + " is out of range for a group of " + std::to_string(size()));
    }
    auto block = impl_->shm->map_peer_block(rank, region.serial, region.offset + region.bytes);
    return std::shared_ptr<char>(block, block.get() + region.offset);
}
std::uint64_t Communicator::in_place_ops() const { return impl_->shm ? impl_->shm->in_place_ops() : 0; }
AbortCause Communicator::abort_cause() const { return impl_->engine->abort_cause(); }
std::string Communicator::abort_reason() const { return impl_->engine->abort_reason(); }
void Communicator::on_abort(std::function<void(AbortCause, const std::string&)> listener) {
    impl_->engine->on_abort(std::move(listener));
}
void Communicator::explain_failures_with(std::function<std::string(const std::string& op)> explainer) {
    impl_->engine->explain_failures_with(std::move(explainer));
}

// ---- argument checks (each names the operation and the bad value) -------------------------------------------

namespace {

void check_reduction(const char* op, DType dtype, ReduceOp rop) {
    if (rop == ReduceOp::avg && !is_floating(dtype)) {
        throw Unsupported(std::string(op) + ": reduce op avg needs a floating dtype, got " + dtype_name(dtype) +
                          " (use sum and divide, or convert to a floating type)");
    }
}

std::size_t total(const std::vector<std::size_t>& v) { return std::accumulate(v.begin(), v.end(), std::size_t{0}); }

// oneCCL's CPU path rejects reduction::avg ("not supported for the scheduler path"): run sum, then divide.
ccl::reduction engine_op(ReduceOp op) { return detail::to_ccl(op == ReduceOp::avg ? ReduceOp::sum : op); }

std::function<void()> avg_finish(ReduceOp op, void* result, std::size_t count, DType dtype, int size) {
    if (op != ReduceOp::avg) return {};
    return [=] { detail::divide_in_place(result, count, dtype, size); };
}

}  // namespace

// ---- issuing ----------------------------------------------------------------------------------------------

namespace {

using Kind = detail::ShmCollectives::Kind;
using OneCcl = std::function<ccl::event(ccl::communicator&)>;

// Through ccl-core's shared-memory path (shm_collectives.hpp).
Request issue_shm(const Communicator::Impl& c, const char* op, Kind kind, const void* send, void* recv, std::size_t count,
                  DType dtype, ReduceOp rop = ReduceOp::sum, int root = 0, std::function<void()> finish = {},
                  std::shared_ptr<const detail::ShmCollectives::Runs> runs = nullptr) {
    c.engine->throw_if_aborted(op);
    return Request(std::make_shared<detail::SharedMemoryOperation>(
        c.engine, op, std::move(finish), c.shm, c.shm->start(kind, send, recv, count, dtype, rop, root, std::move(runs))));
}

// oneCCL's MIN/MAX drop NaN; torch's (and the shared-memory path's) keep it.
bool drops_nan(DType dtype, ReduceOp op) { return is_floating(dtype) && (op == ReduceOp::min || op == ReduceOp::max); }

// Floating MIN/MAX on oneCCL, for every reducing op: `collect` moves the rows this rank reduces (one per rank, `count`
// elements each) into a buffer of ours, and the finish step reduces them into `recv` with the shared-memory path's
// NaN-aware kernel. Up to size x oneCCL's own traffic; MIN/MAX tensors are small in practice.
template <class Collect>
Request issue_nan_aware(Engine& engine, const char* op, void* recv, bool reduces_here, std::size_t count, DType dtype,
                        ReduceOp rop, Collect&& collect) {
    const int n = engine.size();
    const std::size_t row = count * dtype_size(dtype);
    auto rows = std::make_shared<std::vector<char>>(reduces_here ? row * static_cast<std::size_t>(n) : 0);
    void* landing = rows->empty() ? scratch() : rows->data();
    std::function<void()> reduce;
    if (reduces_here) {
        reduce = [rows, recv, row, count, dtype, rop, n] {
            std::vector<const void*> from(static_cast<std::size_t>(n));
            for (int r = 0; r < n; ++r) from[static_cast<std::size_t>(r)] = rows->data() + row * static_cast<std::size_t>(r);
            if (count > 0) detail::reduce_sources(from.data(), n, recv, nullptr, count, dtype, rop);
        };
    } else {
        reduce = [rows] {};  // keeps the landing buffer alive until the operation completes
    }
    return engine.issue(op, engine.all_ranks(), [&](ccl::communicator& comm) { return collect(comm, landing); },
                        std::move(reduce));
}

}  // namespace

Request Communicator::allreduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) {
    const char* name = "allreduce";
    Engine::check_buffer(name, "send", send, count);
    Engine::check_buffer(name, "recv", recv, count);
    check_reduction(name, dtype, op);
    if (impl_->shm) {
        return issue_shm(*impl_, name, Kind::allreduce, send, recv, count, dtype, op, 0,
                         avg_finish(op, recv, count, dtype, size()));
    }
    if (impl_->hierarchy && impl_->hierarchy->takes(count * dtype_size(dtype), count)) {
        return impl_->hierarchy->allreduce(impl_->engine, send, recv, count, dtype, op,
                                           avg_finish(op, recv, count, dtype, size()));
    }
    if (drops_nan(dtype, op)) {
        return issue_nan_aware(*impl_->engine, name, recv, true, count, dtype, op, [&](ccl::communicator& comm, void* rows) {
            return ccl::allgatherv(send, count, rows, std::vector<std::size_t>(static_cast<std::size_t>(size()), count),
                                   detail::to_ccl(dtype), comm);
        });
    }
    return impl_->engine->issue(name, impl_->engine->all_ranks(), [&](ccl::communicator& comm) {
        return ccl::allreduce(send, recv, count, detail::to_ccl(dtype), engine_op(op), comm);
    }, avg_finish(op, recv, count, dtype, size()));
}

Request Communicator::reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, int root) {
    const char* name = "reduce";
    impl_->engine->check_rank(name, "root", root);
    Engine::check_buffer(name, "send", send, count);
    Engine::check_buffer(name, "recv", recv, count);
    check_reduction(name, dtype, op);
    if (drops_nan(dtype, op)) {
        const AlltoallvCounts counts = gather_as_alltoallv(size(), rank(), root, count);
        return issue_nan_aware(*impl_->engine, name, recv, rank() == root, count, dtype, op,
                               [&](ccl::communicator& comm, void* rows) {
            return ccl::alltoallv(send ? send : scratch(), counts.send, rows, counts.recv, detail::to_ccl(dtype), comm);
        });
    }
    return impl_->engine->issue(name, impl_->engine->all_ranks(), [&](ccl::communicator& comm) {
        return ccl::reduce(send, recv, count, detail::to_ccl(dtype), engine_op(op), root, comm);
    }, rank() == root ? avg_finish(op, recv, count, dtype, size()) : nullptr);
}

Request Communicator::broadcast(void* buffer, std::size_t count, DType dtype, int root) {
    const char* name = "broadcast";
    impl_->engine->check_rank(name, "root", root);
    Engine::check_buffer(name, "buffer", buffer, count);
    if (impl_->shm) {
        return issue_shm(*impl_, name, Kind::broadcast, buffer, buffer, count, dtype,
                         ReduceOp::sum, root);
    }
    if (impl_->hierarchy && impl_->hierarchy->takes(count * dtype_size(dtype), count)) {
        return impl_->hierarchy->broadcast(impl_->engine, buffer, count, dtype, root);
    }
    return impl_->engine->issue(name, impl_->engine->all_ranks(), [&](ccl::communicator& comm) {
        return ccl::broadcast(buffer, count, detail::to_ccl(dtype), root, comm);
    });
}

Request Communicator::allgather(const void* send, void* recv, std::size_t count, DType dtype) {
    return allgatherv(send, count, recv, std::vector<std::size_t>(static_cast<std::size_t>(size()), count), dtype);
}

Request Communicator::allgatherv(const void* send, std::size_t send_count, void* recv,
                                 const std::vector<std::size_t>& recv_counts, DType dtype) {
    const char* name = "allgather";
    impl_->engine->check_counts(name, "recv_counts", recv_counts);
    if (recv_counts[static_cast<std::size_t>(rank())] != send_count) {
        throw InvalidArgument(std::string(name) + ": recv_counts[" + std::to_string(rank()) + "] is " +
                              std::to_string(recv_counts[static_cast<std::size_t>(rank())]) +
                              " but this rank sends " + std::to_string(send_count) + " elements");
    }
    Engine::check_buffer(name, "send", send, send_count);
    Engine::check_buffer(name, "recv", recv, total(recv_counts));
    const bool even = std::all_of(recv_counts.begin(), recv_counts.end(), [&](std::size_t c) { return c == send_count; });
    if (impl_->shm && even) {
        return issue_shm(*impl_, name, Kind::allgather, send, recv, send_count, dtype);
    }
    if (impl_->hierarchy && even && impl_->hierarchy->takes(send_count * dtype_size(dtype), send_count)) {
        return impl_->hierarchy->allgather(impl_->engine, send, recv, send_count, dtype);
    }
    return impl_->engine->issue(name, impl_->engine->all_ranks(), [&](ccl::communicator& comm) {
        return ccl::allgatherv(send, send_count, recv, recv_counts, detail::to_ccl(dtype), comm);
    });
}

Request Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op) {
    const char* name = "reduce_scatter";
    Engine::check_buffer(name, "send", send, recv_count * static_cast<std::size_t>(size()));
    Engine::check_buffer(name, "recv", recv, recv_count);
    check_reduction(name, dtype, op);
    if (impl_->shm && impl_->shm->fits(Kind::reduce_scatter, dtype)) {
        return issue_shm(*impl_, name, Kind::reduce_scatter, send, recv, recv_count, dtype, op, 0,
                         avg_finish(op, recv, recv_count, dtype, size()));
    }
    if (impl_->hierarchy && impl_->hierarchy->takes(recv_count * dtype_size(dtype), recv_count)) {
        return impl_->hierarchy->reduce_scatter(impl_->engine, send, recv, recv_count, dtype, op,
                                                avg_finish(op, recv, recv_count, dtype, size()));
    }
    if (drops_nan(dtype, op)) {
        return issue_nan_aware(*impl_->engine, name, recv, true, recv_count, dtype, op, [&](ccl::communicator& comm, void* rows) {
            return ccl::alltoall(send ? send : scratch(), rows, recv_count, detail::to_ccl(dtype), comm);
        });
    }
    return impl_->engine->issue(name, impl_->engine->all_ranks(), [&](ccl::communicator& comm) {
        return ccl::reduce_scatter(send, recv, recv_count, detail::to_ccl(dtype), engine_op(op), comm);
    }, avg_finish(op, recv, recv_count, dtype, size()));
}

Request Communicator::alltoall(const void* send, void* recv, std::size_t count, DType dtype) {
    const char* name = "alltoall";
    Engine::check_buffer(name, "send", send, count * static_cast<std::size_t>(size()));
    Engine::check_buffer(name, "recv", recv, count * static_cast<std::size_t>(size()));
    return impl_->engine->issue(name, impl_->engine->all_ranks(), [&](ccl::communicator& comm) {
        return ccl::alltoall(send, recv, count, detail::to_ccl(dtype), comm);
    });
}

Request Communicator::alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                                const std::vector<std::size_t>& recv_counts, DType dtype) {
    const char* name = "alltoallv";
    impl_->engine->check_counts(name, "send_counts", send_counts);
    impl_->engine->check_counts(name, "recv_counts", recv_counts);
    Engine::check_buffer(name, "send", send, total(send_counts));
    Engine::check_buffer(name, "recv", recv, total(recv_counts));
    return impl_->engine->issue(name, impl_->engine->all_ranks(), [&](ccl::communicator& comm) {
        return ccl::alltoallv(send ? send : scratch(), send_counts, recv ? recv : scratch(), recv_counts,
                              detail::to_ccl(dtype), comm);
    });
}

Request Communicator::gather(const void* send, void* recv, std::size_t count, DType dtype, int root) {
    const char* name = "gather";
    impl_->engine->check_rank(name, "root", root);
    Engine::check_buffer(name, "send", send, count);
    const bool is_root = rank() == root;
    if (is_root) Engine::check_buffer(name, "recv", recv, count * static_cast<std::size_t>(size()));
    const AlltoallvCounts counts = gather_as_alltoallv(size(), rank(), root, count);
    return impl_->engine->issue(name, impl_->engine->all_ranks(), [&](ccl::communicator& comm) {
        return ccl::alltoallv(send ? send : scratch(), counts.send, is_root && recv ? recv : scratch(), counts.recv,
                              detail::to_ccl(dtype), comm);
    });
}

Request Communicator::scatter(const void* send, void* recv, std::size_t count, DType dtype, int root) {
    const char* name = "scatter";
    impl_->engine->check_rank(name, "root", root);
    Engine::check_buffer(name, "recv", recv, count);
    const bool is_root = rank() == root;
    if (is_root) Engine::check_buffer(name, "send", send, count * static_cast<std::size_t>(size()));
    const AlltoallvCounts counts = scatter_as_alltoallv(size(), rank(), root, count);
    return impl_->engine->issue(name, impl_->engine->all_ranks(), [&](ccl::communicator& comm) {
        return ccl::alltoallv(is_root && send ? send : scratch(), counts.send, recv ? recv : scratch(), counts.recv,
                              detail::to_ccl(dtype), comm);
    });
}

Request Communicator::send(const void* buffer, std::size_t count, DType dtype, int peer) {
    const char* name = "send";
    impl_->engine->check_rank(name, "peer", peer);
    if (peer == rank()) throw InvalidArgument("send: peer " + std::to_string(peer) + " is this rank; send to a different rank");
    Engine::check_buffer(name, "buffer", buffer, count);
    return impl_->engine->issue(name, "rank " + std::to_string(peer), [&](ccl::communicator& comm) {
        return ccl::send(const_cast<void*>(buffer), count, detail::to_ccl(dtype), peer, comm);
    });
}

Request Communicator::recv(void* buffer, std::size_t count, DType dtype, int peer) {
    const char* name = "recv";
    impl_->engine->check_rank(name, "peer", peer);
    if (peer == rank()) throw InvalidArgument("recv: peer " + std::to_string(peer) + " is this rank; receive from a different rank");
    Engine::check_buffer(name, "buffer", buffer, count);
    return impl_->engine->issue(name, "rank " + std::to_string(peer), [&](ccl::communicator& comm) {
        return ccl::recv(buffer, count, detail::to_ccl(dtype), peer, comm);
    });
}

// oneCCL's barrier blocks inside the call, polling for as long as the last rank takes (a core burnt while waiting
// for a late peer). A one-element allreduce synchronises the same way, through our wait (which naps when a peer is
// late) and, on one host, the shared-memory path. Its token lives as long as the operation.
Request Communicator::barrier() {
    const char* name = "barrier";
    auto token = std::make_shared<std::int32_t>(0);
    std::function<void()> keep_token = [token] {};
    if (impl_->shm) {
        return issue_shm(*impl_, name, Kind::allreduce, token.get(), token.get(), 1,
                         DType::int32, ReduceOp::sum, 0, keep_token);
    }
    return impl_->engine->issue(name, impl_->engine->all_ranks(), [&](ccl::communicator& comm) {
        return ccl::allreduce(token.get(), token.get(), 1, detail::to_ccl(DType::int32), engine_op(ReduceOp::sum), comm);
    }, keep_token);
}

Request detail::CommunicatorInternals::allgather_into_runs(Communicator& c, const void* send, void* recv,
                                                           std::size_t count, DType dtype,
                                                           std::shared_ptr<const ShmCollectives::Runs> runs) {
    if (!c.impl_->shm) throw Unsupported("allgather into runs needs the shared-memory path");
    return issue_shm(*c.impl_, "allgather", Kind::allgather, send, recv, count, dtype, ReduceOp::sum, 0, {},
                     std::move(runs));
}

Request detail::CommunicatorInternals::reduce_scatter_from_runs(Communicator& c, const void* send, void* recv,
                                                                std::size_t count, DType dtype, ReduceOp op,
                                                                std::shared_ptr<const ShmCollectives::Runs> runs) {
    if (!c.impl_->shm || !c.impl_->shm->fits(Kind::reduce_scatter, dtype)) {
        throw Unsupported("reduce_scatter from runs needs the shared-memory path");
    }
    return issue_shm(*c.impl_, "reduce_scatter", Kind::reduce_scatter, send, recv, count, dtype, op, 0, {},
                     std::move(runs));
}

// ---- sub-communicators -------------------------------------------------------------------------------------

std::shared_ptr<Communicator> Communicator::subgroup(const std::vector<int>& ranks, const std::string& name) {
    const char* op = "subgroup";
    impl_->engine->throw_if_aborted(op);
    if (ranks.empty()) throw InvalidArgument("subgroup: the list of ranks is empty");
    std::vector<bool> seen(static_cast<std::size_t>(size()), false);
    std::string key;
    for (int r : ranks) {
        impl_->engine->check_rank(op, "rank", r);
        if (seen[static_cast<std::size_t>(r)]) throw InvalidArgument("subgroup: rank " + std::to_string(r) + " is listed twice");
        seen[static_cast<std::size_t>(r)] = true;
        key += "_" + std::to_string(r);
    }
    const int index = impl_->subgroups_made++;
    auto me = std::find(ranks.begin(), ranks.end(), rank());
    if (me == ranks.end()) return nullptr;
    CommunicatorOptions options = this->options();
    options.name = name.empty() ? options.name + "/sub" + std::to_string(index) : name;
    auto store = std::make_shared<PrefixStore>("ccl_core/sub" + std::to_string(index) + key, impl_->engine->store());
    return create(std::move(store), static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()), options);
}

}  // namespace ccl_core
