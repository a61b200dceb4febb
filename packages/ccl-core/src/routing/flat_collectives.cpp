#include "flat_collectives.hpp"

#include "../kernels/elementwise.hpp"
#include "../parallel/worker_pool.hpp"
#include "../shm/shm_operation.hpp"

#include <ccl_core/collectives.hpp>
#include <ccl_core/errors.hpp>

namespace ccl_core::detail {

namespace {

// A valid address for buffers that carry zero elements (gather/scatter through alltoallv).
void* scratch() {
    static thread_local char byte;
    return &byte;
}

// oneCCL's CPU path rejects reduction::avg ("not supported for the scheduler path"): run sum; the caller divides.
ccl::reduction oneccl_reduction(ReduceOp op) { return to_ccl(op == ReduceOp::avg ? ReduceOp::sum : op); }

}  // namespace

std::shared_ptr<FlatCollectives> FlatCollectives::create(std::shared_ptr<Group> group, Milliseconds timeout,
                                                         std::string& shm_status) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::shared_ptr<FlatCollectives> flat(new FlatCollectives());
    flat->group_ = std::move(group);
    flat->engine_ = Engine::create(flat->group_);
    Group& g = *flat->group_;
    if (g.local_ranks() != g.size()) {
        shm_status = "off: the group spans hosts";
        return flat;
    }
    // what is left of the bootstrap's time
    const auto left = std::max(Milliseconds(0), std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now()));
    WorkerPool& pool = WorkerPool::instance();
    pool.use(WorkerPool::threads_for(g.local_ranks(), g.host_cpus()));  // the process's first group on a host decides
    flat->shm_ = ShmCollectives::create(*std::make_shared<PrefixStore>("ccl_core/shm", g.store()), g.rank(), g.size(),
                                        pool.threads(), left, shm_status);
    g.lend_local_path(flat->shm_);
    return flat;
}

GroupPaths FlatCollectives::paths() const {
    GroupPaths p;
    p.shm = shm_.get();
    return p;
}

Request FlatCollectives::run(const OpArgs& a, std::function<void()> finish) {
    return run(a, choose_path(a, paths()), std::move(finish));
}

Request FlatCollectives::run(const OpArgs& a, Path path, std::function<void()> finish,
                             std::shared_ptr<const ShmCollectives::Runs> runs) {
    switch (path) {
        case Path::shared_memory: return through_shared_memory(a, std::move(finish), std::move(runs));
        case Path::nan_aware: return nan_aware(a);  // min/max: nothing to finish
        case Path::oneccl: return through_oneccl(a, std::move(finish));
        case Path::hierarchy: break;
    }
    throw Unsupported(std::string(op_name(a.kind)) + ": a group on one side of the hierarchy has no hierarchy");
}

Request FlatCollectives::through_shared_memory(const OpArgs& a, std::function<void()> finish,
                                               std::shared_ptr<const ShmCollectives::Runs> runs) {
    using Kind = ShmCollectives::Kind;
    const char* op = op_name(a.kind);
    group_->throw_if_aborted(op);
    if (!shm_) throw Unsupported(std::string(op) + " through shared memory needs every rank on this host");
    Kind kind = Kind::allreduce;  // allreduce and barrier (a one-element allreduce)
    const void* send = a.send;
    if (a.kind == OpKind::broadcast) kind = Kind::broadcast, send = a.recv;
    if (a.kind == OpKind::allgatherv) kind = Kind::allgather;
    if (a.kind == OpKind::reduce_scatter) kind = Kind::reduce_scatter;
    auto queued = shm_->start(kind, send, a.recv, a.count, a.dtype, a.op, a.root, std::move(runs));
    return Request(std::make_shared<SharedMemoryOperation>(group_, op, std::move(finish), shm_, std::move(queued)));
}

Request FlatCollectives::through_oneccl(const OpArgs& a, std::function<void()> finish) {
    const Group& g = *group_;
    const char* op = op_name(a.kind);
    const auto dtype = to_ccl(a.dtype);
    std::string peers = g.all_ranks();
    StartOneCcl start;
    switch (a.kind) {
        case OpKind::allreduce:
            start = [&](ccl::communicator& c) { return ccl::allreduce(a.send, a.recv, a.count, dtype, oneccl_reduction(a.op), c); };
            break;
        case OpKind::reduce:
            start = [&](ccl::communicator& c) {
                return ccl::reduce(a.send, a.recv, a.count, dtype, oneccl_reduction(a.op), a.root, c);
            };
            break;
        case OpKind::broadcast:
            start = [&](ccl::communicator& c) { return ccl::broadcast(a.recv, a.count, dtype, a.root, c); };
            break;
        case OpKind::allgatherv:
            start = [&](ccl::communicator& c) { return ccl::allgatherv(a.send, a.count, a.recv, *a.recv_counts, dtype, c); };
            break;
        case OpKind::reduce_scatter:
            start = [&](ccl::communicator& c) {
                return ccl::reduce_scatter(a.send, a.recv, a.count, dtype, oneccl_reduction(a.op), c);
            };
            break;
        case OpKind::alltoall:
            start = [&](ccl::communicator& c) { return ccl::alltoall(a.send, a.recv, a.count, dtype, c); };
            break;
        case OpKind::alltoallv:
            start = [&](ccl::communicator& c) {
                return ccl::alltoallv(a.send ? a.send : scratch(), *a.send_counts, a.recv ? a.recv : scratch(),
                                      *a.recv_counts, dtype, c);
            };
            break;
        case OpKind::gather:
        case OpKind::scatter:
            // as the alltoallv in which only the root receives (gather) or sends (scatter)
            start = [&](ccl::communicator& c) {
                const bool is_root = g.rank() == a.root;
                const AlltoallvCounts counts = a.kind == OpKind::gather
                                                   ? gather_as_alltoallv(g.size(), g.rank(), a.root, a.count)
                                                   : scatter_as_alltoallv(g.size(), g.rank(), a.root, a.count);
                const void* from = a.kind == OpKind::scatter && !is_root ? nullptr : a.send;
                void* to = a.kind == OpKind::gather && !is_root ? nullptr : a.recv;
                return ccl::alltoallv(from ? from : scratch(), counts.send, to ? to : scratch(), counts.recv, dtype, c);
            };
            break;
        case OpKind::send:
            peers = "rank " + std::to_string(a.root);
            start = [&](ccl::communicator& c) { return ccl::send(const_cast<void*>(a.send), a.count, dtype, a.root, c); };
            break;
        case OpKind::recv:
            peers = "rank " + std::to_string(a.root);
            start = [&](ccl::communicator& c) { return ccl::recv(a.recv, a.count, dtype, a.root, c); };
            break;
        case OpKind::barrier:
            // oneCCL's barrier blocks inside the call, polling for as long as the last rank takes (a core burnt while
            // waiting for a late peer); a one-element allreduce synchronises the same way, through the group's wait
            start = [&](ccl::communicator& c) { return ccl::allreduce(a.recv, a.recv, 1, dtype, to_ccl(ReduceOp::sum), c); };
            break;
    }
    return engine_->issue(op, std::move(peers), std::move(start), std::move(finish));
}

// Floating MIN/MAX on oneCCL: oneCCL moves the rows this rank reduces (one per rank, `count` elements each) into a
// buffer of ours, and the finish step reduces them into `recv` with the shared-memory path's NaN-aware kernel. Up to
// size x oneCCL's own traffic; MIN/MAX tensors are small in practice.
Request FlatCollectives::nan_aware(const OpArgs& a) {
    const Group& g = *group_;
    const int n = g.size();
    const bool reduces_here = a.kind != OpKind::reduce || g.rank() == a.root;
    const std::size_t row = a.count * dtype_size(a.dtype);
    auto rows = std::make_shared<std::vector<char>>(reduces_here ? row * static_cast<std::size_t>(n) : 0);
    void* landing = rows->empty() ? scratch() : rows->data();
    const auto dtype = to_ccl(a.dtype);
    std::function<void()> reduce = [rows] {};  // keeps the landing buffer alive until the operation completes
    if (reduces_here) {
        reduce = [rows, recv = a.recv, row, count = a.count, dtype = a.dtype, op = a.op, n] {
            std::vector<const void*> from(static_cast<std::size_t>(n));
            for (int r = 0; r < n; ++r) from[static_cast<std::size_t>(r)] = rows->data() + row * static_cast<std::size_t>(r);
            if (count > 0) reduce_sources(from.data(), n, recv, nullptr, count, dtype, op);
        };
    }
    StartOneCcl start;
    if (a.kind == OpKind::allreduce) {
        start = [&](ccl::communicator& c) {
            return ccl::allgatherv(a.send, a.count, landing, std::vector<std::size_t>(static_cast<std::size_t>(n), a.count),
                                   dtype, c);
        };
    } else if (a.kind == OpKind::reduce) {
        start = [&](ccl::communicator& c) {
            const AlltoallvCounts counts = gather_as_alltoallv(n, g.rank(), a.root, a.count);
            return ccl::alltoallv(a.send ? a.send : scratch(), counts.send, landing, counts.recv, dtype, c);
        };
    } else {  // reduce_scatter
        start = [&](ccl::communicator& c) { return ccl::alltoall(a.send ? a.send : scratch(), landing, a.count, dtype, c); };
    }
    return engine_->issue(op_name(a.kind), g.all_ranks(), std::move(start), std::move(reduce));
}

}  // namespace ccl_core::detail
