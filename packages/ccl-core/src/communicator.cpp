// The host communicator: every collective on host memory, checked (validate.hpp), then routed (routing/route.hpp) to
// the hierarchy across hosts, or to the group's flat collectives (shared memory, or oneCCL).
#include "communicator_impl.hpp"

#include "kernels/elementwise.hpp"
#include "progress/progress_thread.hpp"
#include <ccl_core/oneccl/runtime.hpp>

#include <ccl_core/validate.hpp>

#include <algorithm>

namespace ccl_core {

// ---- bootstrap ---------------------------------------------------------------------------------------------

std::shared_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank, int size,
                                                   const CommunicatorOptions& options) {
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    auto left = [&] {  // what is left of the bootstrap's time for the next step
        return std::max(Milliseconds(0), std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now()));
    };
    initialize_runtime();  // before the group meets: ranks announce the oneCCL transports it settles
    auto impl = std::make_shared<Impl>();
    impl->group = Group::join(std::move(store), rank, size, options);
    impl->flat = detail::FlatCollectives::create(impl->group, left(), impl->shm_status);
    impl->paths = impl->flat->paths();
    if (impl->group->local_ranks() != size) {  // spans hosts
        impl->hierarchy = detail::Hierarchy::create(impl->group, left(), impl->hierarchy_status);
    }
    if (impl->hierarchy) {
        impl->group->lend_local_path(impl->hierarchy);
        impl->paths.hierarchy = true;
        impl->paths.hierarchy_min_bytes = impl->hierarchy->min_bytes();
        impl->paths.hierarchy_min_count = impl->hierarchy->min_count();
        impl->paths.hierarchy_allreduce_only = impl->hierarchy->through_leaders();
    }
    return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

detail::ShmCollectives* Communicator::shm() const { return impl_->flat->shm(); }

Communicator::Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
// The group's last operation may still be held by the progress thread (polled, or napped on) or lie in its graveyard
// (release_on_a_user_thread), and it holds the engine: let go of here, on the thread that lets go of the
// communicator, the engine goes with the communicator, and the peers see this rank leave at once (rank 0 waits for
// that, up to 10 s: Engine::wait_for_departures). The bound covers a nap on a peer's futex.
Communicator::~Communicator() { detail::let_go_of_completed_operations(std::chrono::milliseconds(250)); }

int Communicator::rank() const { return impl_->group->rank(); }
int Communicator::size() const { return impl_->group->size(); }
const CommunicatorOptions& Communicator::options() const { return impl_->group->options(); }
bool Communicator::aborted() const { return impl_->group->aborted(); }
int Communicator::local_ranks() const { return impl_->group->local_ranks(); }
bool Communicator::oversubscribed() const { return impl_->group->oversubscribed(); }
bool Communicator::shared_memory() const { return impl_->flat->shm() != nullptr; }
const std::string& Communicator::shared_memory_status() const { return impl_->shm_status; }
bool Communicator::hierarchical() const { return impl_->hierarchy != nullptr; }
const std::string& Communicator::hierarchy_status() const { return impl_->hierarchy_status; }
void Communicator::abort(const std::string& reason) {
    impl_->group->abort(reason, AbortCause::by_user);
    if (impl_->hierarchy) impl_->hierarchy->abort(reason);
}
std::shared_ptr<void> Communicator::allocate(std::size_t bytes) {
    if (!shm()) return nullptr;
    auto block = shm()->allocate(bytes);
    if (!block) return nullptr;
    char* data = block->data;
    return std::shared_ptr<void>(std::move(block), data);
}
bool Communicator::registered(const void* p, std::size_t bytes) const {
    detail::RegisteredPool::Where where;
    return shm() && shm()->pool().find(p, bytes, where) != nullptr;
}
Communicator::RegisteredRegion Communicator::locate_registered(const void* p, std::size_t bytes,
                                                               std::shared_ptr<void>& hold) const {
    detail::RegisteredPool::Where where;
    auto block = shm() ? shm()->pool().find(p, bytes, where) : nullptr;
    if (!block) {
        throw InvalidArgument("the buffer does not lie in this group's registered memory (allocate it from the group: "
                              "Communicator::allocate, torch's allocate_tensor)");
    }
    block->peers_write = true;  // the region is located to be handed to peers that map it writable
    hold = block;
    return {where.serial, where.offset, bytes};
}
std::shared_ptr<char> Communicator::map_registered(int rank, const RegisteredRegion& region) const {
    if (!shm()) throw Unsupported("registered memory needs the shared-memory path (every rank on one host)");
    if (rank < 0 || rank >= size()) {
        throw InvalidArgument("rank " + std::to_string(rank) + " is out of range for a group of " + std::to_string(size()));
    }
    auto block = shm()->map_peer_block(rank, region.serial, region.offset + region.bytes);
    return std::shared_ptr<char>(block, block.get() + region.offset);
}
std::uint64_t Communicator::in_place_ops() const { return shm() ? shm()->in_place_ops() : 0; }
AbortCause Communicator::abort_cause() const { return impl_->group->abort_cause(); }
std::string Communicator::abort_reason() const { return impl_->group->abort_reason(); }
void Communicator::on_abort(std::function<void(AbortCause, const std::string&)> listener) {
    impl_->group->on_abort(std::move(listener));
}
void Communicator::explain_failures_with(std::function<std::string(const std::string& op)> explainer) {
    impl_->group->explain_failures_with(std::move(explainer));
}

// ---- the collectives: each checked, then routed -------------------------------------------------------------

namespace {

// avg runs as sum on every path; the division follows on the ranks that hold a result.
std::function<void()> avg_finish(ReduceOp op, void* result, std::size_t count, DType dtype, int size) {
    if (op != ReduceOp::avg) return {};
    return [=] { detail::divide_in_place(result, count, dtype, size); };
}

}  // namespace

Request Communicator::run(const OpArgs& a, std::function<void()> finish) {
    validate(a, rank(), size());
    const detail::Path path = detail::choose_path(a, impl_->paths);
    if (path == detail::Path::hierarchy) return impl_->hierarchy->run(a, std::move(finish));
    return impl_->flat->run(a, path, std::move(finish));
}

Request Communicator::allreduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) {
    return run({OpKind::allreduce, send, recv, count, dtype, op}, avg_finish(op, recv, count, dtype, size()));
}

Request Communicator::reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, int root) {
    return run({OpKind::reduce, send, recv, count, dtype, op, root},
               rank() == root ? avg_finish(op, recv, count, dtype, size()) : nullptr);
}

Request Communicator::broadcast(void* buffer, std::size_t count, DType dtype, int root) {
    return run({OpKind::broadcast, buffer, buffer, count, dtype, ReduceOp::sum, root});
}

Request Communicator::allgather(const void* send, void* recv, std::size_t count, DType dtype) {
    return allgatherv(send, count, recv, std::vector<std::size_t>(static_cast<std::size_t>(size()), count), dtype);
}

Request Communicator::allgatherv(const void* send, std::size_t send_count, void* recv,
                                 const std::vector<std::size_t>& recv_counts, DType dtype) {
    OpArgs a{OpKind::allgatherv, send, recv, send_count, dtype};
    a.recv_counts = &recv_counts;
    return run(a);
}

Request Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op) {
    return run({OpKind::reduce_scatter, send, recv, recv_count, dtype, op},
               avg_finish(op, recv, recv_count, dtype, size()));
}

Request Communicator::alltoall(const void* send, void* recv, std::size_t count, DType dtype) {
    return run({OpKind::alltoall, send, recv, count, dtype});
}

Request Communicator::alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                                const std::vector<std::size_t>& recv_counts, DType dtype) {
    OpArgs a{OpKind::alltoallv, send, recv, 0, dtype};
    a.send_counts = &send_counts;
    a.recv_counts = &recv_counts;
    return run(a);
}

Request Communicator::gather(const void* send, void* recv, std::size_t count, DType dtype, int root) {
    return run({OpKind::gather, send, recv, count, dtype, ReduceOp::sum, root});
}

Request Communicator::scatter(const void* send, void* recv, std::size_t count, DType dtype, int root) {
    return run({OpKind::scatter, send, recv, count, dtype, ReduceOp::sum, root});
}

Request Communicator::send(const void* buffer, std::size_t count, DType dtype, int peer) {
    return run({OpKind::send, buffer, nullptr, count, dtype, ReduceOp::sum, peer});
}

Request Communicator::recv(void* buffer, std::size_t count, DType dtype, int peer) {
    return run({OpKind::recv, nullptr, buffer, count, dtype, ReduceOp::sum, peer});
}

// A one-element allreduce (flat_collectives.cpp says why not oneCCL's barrier); its token lives as long as the op.
Request Communicator::barrier() {
    auto token = std::make_shared<std::int32_t>(0);
    return run({OpKind::barrier, token.get(), token.get(), 1, DType::int32}, [token] {});
}

// ---- sub-communicators -------------------------------------------------------------------------------------

std::shared_ptr<Communicator> Communicator::subgroup(const std::vector<int>& ranks, const std::string& name) {
    const char* op = "subgroup";
    impl_->group->throw_if_aborted(op);
    if (ranks.empty()) throw InvalidArgument("subgroup: the list of ranks is empty");
    std::vector<bool> seen(static_cast<std::size_t>(size()), false);
    std::string key;
    for (int r : ranks) {
        check_rank(op, "rank", r, size());
        if (seen[static_cast<std::size_t>(r)]) throw InvalidArgument("subgroup: rank " + std::to_string(r) + " is listed twice");
        seen[static_cast<std::size_t>(r)] = true;
        key += "_" + std::to_string(r);
    }
    const int index = impl_->subgroups_made++;
    auto me = std::find(ranks.begin(), ranks.end(), rank());
    if (me == ranks.end()) return nullptr;
    CommunicatorOptions options = this->options();
    options.name = name.empty() ? options.name + "/sub" + std::to_string(index) : name;
    auto store = std::make_shared<PrefixStore>("ccl_core/sub" + std::to_string(index) + key, impl_->group->store());
    return create(std::move(store), static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()), options);
}

}  // namespace ccl_core
