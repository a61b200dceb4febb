#include <ccl_core/runtime.hpp>

#include "communicator_impl.hpp"
#include "elementwise.hpp"
#include <ccl_core/oneccl/store_kvs.hpp>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include <sched.h>
#include <unistd.h>

namespace ccl_core {
namespace {

std::string joined_key(int rank) { return "ccl_core/joined/" + std::to_string(rank); }

// Who shares a host: the hostname plus the kernel's boot id (containers may share a hostname), never
// launcher variables such as LOCAL_WORLD_SIZE, which are wrong for sub-groups.
std::string host_identity() {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    std::string boot;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
    return std::string(name) + "/" + boot;
}

// The pid namespace this process lives in ("pid:[4026531836]"), "" when unknown.
std::string pid_namespace() {
    char link[64] = {};
    const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
    return n > 0 ? std::string(link, static_cast<std::size_t>(n)) : std::string();
}

// The cpus this process may run on, as "0,1,5". Launchers that pin ranks (Intel MPI) give each rank its own:
// whether ranks outnumber cores is decided on the union over the ranks of a host.
std::string affinity_list() {
    cpu_set_t set;
    std::string out;
    if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &set)) out += (out.empty() ? "" : ",") + std::to_string(cpu);
    }
    return out;
}

std::string all_ranks(int size) {
    return size == 1 ? "rank 0" : "ranks 0-" + std::to_string(size - 1);
}

// A valid address for buffers that carry zero elements (gather/scatter through alltoallv).
void* scratch() {
    static thread_local char byte;
    return &byte;
}

}  // namespace

// ---- bootstrap ---------------------------------------------------------------------------------------------

std::shared_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank, int size,
                                                   const CommunicatorOptions& options) {
    if (!store) throw InvalidArgument("Communicator::create: store is null");
    if (size < 1) throw InvalidArgument("Communicator::create: size must be >= 1, got " + std::to_string(size));
    if (rank < 0 || rank >= size) {
        throw InvalidArgument("Communicator::create: rank " + std::to_string(rank) + " is out of range for size " +
                              std::to_string(size) + " (0.." + std::to_string(size - 1) + ")");
    }
    if (options.timeout.count() <= 0) throw InvalidArgument("Communicator::create: timeout must be positive");
    initialize_runtime();

    auto impl = std::make_shared<Impl>(std::move(store), rank, size, options);
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    auto remaining = [&] {
        return std::max(Milliseconds(0), std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now()));
    };
    const std::string where = "bootstrap of communicator '" + options.name + "' (rank " + std::to_string(rank) +
                              " of " + std::to_string(size) + ")";

    // oneCCL's rendezvous (through our store, see StoreKvs) has no useful timeout of its own: first make
    // sure that every rank has arrived, so that a missing one is named in a clear error.
    // Each rank announces itself with its host identity, which also tells how many ranks share a host.
    // The announcement is "<host identity>\n<pid>\n<cpus>\n<pid namespace>": the pids of same-host peers let
    // survivors clean up after a peer that was killed (shm_cleanup.hpp) and notice its death while waiting (only
    // when it shares our pid namespace: a pid from another container means nothing here); their cpus tell whether
    // the host's ranks outnumber cores.
    const std::string me = host_identity();
    const std::string my_pid_namespace = pid_namespace();
    const std::string announcement = me + "\n" + std::to_string(::getpid()) + "\n" + affinity_list() + "\n" +
                                     my_pid_namespace;
    impl->store->set(joined_key(rank), Bytes(announcement.begin(), announcement.end()));
    std::vector<int> missing;
    std::set<std::string> host_cpus;
    int same_host = 0;
    for (int r = 0; r < size; ++r) {
        try {
            Bytes bytes = impl->store->get(joined_key(r), missing.empty() ? remaining() : Milliseconds(0));
            std::istringstream text(std::string(bytes.begin(), bytes.end()));
            std::string identity, pid, cpus, cpu, pid_ns;
            std::getline(text, identity);
            std::getline(text, pid);
            std::getline(text, cpus);
            std::getline(text, pid_ns);
            if (identity != me) continue;
            ++same_host;
            const bool pid_means_something = !pid_ns.empty() && pid_ns == my_pid_namespace &&
                                             pid.find_first_not_of("0123456789") == std::string::npos &&
                                             !pid.empty() && pid.size() < 10;
            if (r != rank && pid_means_something) impl->local_peer_pids.push_back({r, std::stoi(pid)});
            std::istringstream list(cpus);
            while (std::getline(list, cpu, ',')) host_cpus.insert(cpu);
        } catch (const Timeout&) {
            missing.push_back(r);
        }
    }
    impl->local_ranks = same_host;
    impl->oversubscribed = !host_cpus.empty() && same_host > static_cast<int>(host_cpus.size());
    if (!missing.empty()) {
        std::string list;
        for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
        throw Timeout(where + ": rank(s) " + list + " did not join within " + std::to_string(options.timeout.count()) +
                      " ms");
    }

    try {
        impl->kvs = std::make_shared<detail::StoreKvs>(std::make_shared<PrefixStore>("ccl_core/oneccl", impl->store), 0);
        impl->comm = std::make_unique<ccl::communicator>(ccl::create_communicator(size, rank, impl->kvs));
    } catch (const std::exception& e) {
        throw BackendError(where + ": oneCCL could not create the communicator: " + e.what());
    }
    if (same_host == size) {
        impl->shm = detail::ShmCollectives::create(*std::make_shared<PrefixStore>("ccl_core/shm", impl->store), rank,
                                                 size, remaining());
    }
    return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

Communicator::Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

void Communicator::Impl::wait_for_departures() noexcept {
    try {
        PrefixStore departed("ccl_core/departed", store);
        departed.set(std::to_string(rank), Bytes{'1'});
        if (rank != 0) return;
        const auto limit = std::min(options.timeout, Milliseconds(10000));
        const auto deadline = std::chrono::steady_clock::now() + limit;
        for (int r = 1; r < size; ++r) {
            const auto left = std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return;
            (void)departed.get(std::to_string(r), left);
        }
    } catch (const std::exception&) {
        // a store that is gone or a rank that never came: nothing more to protect
    }
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
const CommunicatorOptions& Communicator::options() const { return impl_->options; }
bool Communicator::aborted() const { return impl_->is_aborted.load(); }
int Communicator::local_ranks() const { return impl_->local_ranks; }
bool Communicator::oversubscribed() const { return impl_->oversubscribed; }
bool Communicator::shared_memory_allreduce() const { return impl_->shm != nullptr; }
void Communicator::abort(const std::string& reason) { impl_->abort(reason); }

// ---- argument checks (each names the operation and the bad value) -------------------------------------------

namespace {

void check_rank(const Communicator::Impl& c, const char* op, const char* what, int r) {
    if (r < 0 || r >= c.size) {
        throw InvalidArgument(std::string(op) + ": " + what + " " + std::to_string(r) + " is out of range for a group of " +
                              std::to_string(c.size) + " rank(s) (0.." + std::to_string(c.size - 1) + ")");
    }
}

void check_buffer(const char* op, const char* name, const void* p, std::size_t count) {
    if (p == nullptr && count > 0) {
        throw InvalidArgument(std::string(op) + ": " + name + " is null but must hold " + std::to_string(count) + " elements");
    }
}

void check_counts(const Communicator::Impl& c, const char* op, const char* name, const std::vector<std::size_t>& v) {
    if (v.size() != static_cast<std::size_t>(c.size)) {
        throw InvalidArgument(std::string(op) + ": " + name + " has " + std::to_string(v.size()) +
                              " entries; expected one per rank (" + std::to_string(c.size) + ")");
    }
}

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

template <class Start>
Request issue(const std::shared_ptr<Communicator::Impl>& c, const char* op, std::string peers, Start&& start,
              std::function<void()> finish = {}) {
    c->throw_if_aborted(op);
    auto state = std::make_shared<detail::EngineOperation>(c, op, std::move(peers));
    state->finish = std::move(finish);
    std::lock_guard<std::mutex> lock(detail::engine_mutex());
    try {
        state->event = start(*c->comm);
    } catch (const std::exception& e) {
        throw BackendError(std::string(op) + " on " + c->describe() + ": oneCCL refused the operation: " + e.what());
    }
    return Request(std::move(state));
}

// The same through ccl-core's shared-memory path (shm_collectives.hpp).
Request issue_shm(const std::shared_ptr<Communicator::Impl>& c, const char* op, detail::ShmCollectives::Kind kind,
                  const void* send, void* recv, std::size_t count, DType dtype, ReduceOp rop = ReduceOp::sum,
                  int root = 0, std::function<void()> finish = {}) {
    c->throw_if_aborted(op);
    auto state = std::make_shared<detail::EngineOperation>(c, op, all_ranks(c->size));
    state->finish = std::move(finish);
    state->shm_op = c->shm->start(kind, send, recv, count, dtype, rop, root);
    return Request(std::move(state));
}

// oneCCL's MIN/MAX drop NaN; torch's (and the shared-memory path's) keep it.
bool drops_nan(DType dtype, ReduceOp op) { return is_floating(dtype) && (op == ReduceOp::min || op == ReduceOp::max); }

// Floating MIN/MAX on oneCCL, for every reducing op: `collect` moves the rows this rank reduces (one per rank, `count`
// elements each) into a buffer of ours, and the finish step reduces them into `recv` with the shared-memory path's
// NaN-aware kernel. Up to size x oneCCL's own traffic; MIN/MAX tensors are small in practice.
template <class Collect>
Request issue_nan_aware(const std::shared_ptr<Communicator::Impl>& c, const char* op, void* recv, bool reduces_here,
                        std::size_t count, DType dtype, ReduceOp rop, Collect&& collect) {
    const int n = c->size;
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
    return issue(c, op, all_ranks(n), [&](ccl::communicator& comm) { return collect(comm, landing); },
                 std::move(reduce));
}

}  // namespace

Request Communicator::allreduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) {
    const char* name = "allreduce";
    check_buffer(name, "send", send, count);
    check_buffer(name, "recv", recv, count);
    check_reduction(name, dtype, op);
    if (impl_->shm) {
        return issue_shm(impl_, name, detail::ShmCollectives::Kind::allreduce, send, recv, count, dtype, op, 0,
                         avg_finish(op, recv, count, dtype, size()));
    }
    if (drops_nan(dtype, op)) {
        return issue_nan_aware(impl_, name, recv, true, count, dtype, op, [&](ccl::communicator& comm, void* rows) {
            return ccl::allgatherv(send, count, rows, std::vector<std::size_t>(static_cast<std::size_t>(size()), count),
                                   detail::to_ccl(dtype), comm);
        });
    }
    return issue(impl_, name, all_ranks(size()), [&](ccl::communicator& comm) {
        return ccl::allreduce(send, recv, count, detail::to_ccl(dtype), engine_op(op), comm);
    }, avg_finish(op, recv, count, dtype, size()));
}

Request Communicator::reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, int root) {
    const char* name = "reduce";
    check_rank(*impl_, name, "root", root);
    check_buffer(name, "send", send, count);
    check_buffer(name, "recv", recv, count);
    check_reduction(name, dtype, op);
    if (drops_nan(dtype, op)) {
        const AlltoallvCounts counts = gather_as_alltoallv(size(), rank(), root, count);
        return issue_nan_aware(impl_, name, recv, rank() == root, count, dtype, op,
                               [&](ccl::communicator& comm, void* rows) {
            return ccl::alltoallv(send ? send : scratch(), counts.send, rows, counts.recv, detail::to_ccl(dtype), comm);
        });
    }
    return issue(impl_, name, all_ranks(size()), [&](ccl::communicator& comm) {
        return ccl::reduce(send, recv, count, detail::to_ccl(dtype), engine_op(op), root, comm);
    }, rank() == root ? avg_finish(op, recv, count, dtype, size()) : nullptr);
}

Request Communicator::broadcast(void* buffer, std::size_t count, DType dtype, int root) {
    const char* name = "broadcast";
    check_rank(*impl_, name, "root", root);
    check_buffer(name, "buffer", buffer, count);
    if (impl_->shm) {
        return issue_shm(impl_, name, detail::ShmCollectives::Kind::broadcast, buffer, buffer, count, dtype,
                         ReduceOp::sum, root);
    }
    return issue(impl_, name, all_ranks(size()), [&](ccl::communicator& comm) {
        return ccl::broadcast(buffer, count, detail::to_ccl(dtype), root, comm);
    });
}

Request Communicator::allgather(const void* send, void* recv, std::size_t count, DType dtype) {
    return allgatherv(send, count, recv, std::vector<std::size_t>(static_cast<std::size_t>(size()), count), dtype);
}

Request Communicator::allgatherv(const void* send, std::size_t send_count, void* recv,
                                 const std::vector<std::size_t>& recv_counts, DType dtype) {
    const char* name = "allgather";
    check_counts(*impl_, name, "recv_counts", recv_counts);
    if (recv_counts[static_cast<std::size_t>(rank())] != send_count) {
        throw InvalidArgument(std::string(name) + ": recv_counts[" + std::to_string(rank()) + "] is " +
                              std::to_string(recv_counts[static_cast<std::size_t>(rank())]) +
                              " but this rank sends " + std::to_string(send_count) + " elements");
    }
    check_buffer(name, "send", send, send_count);
    check_buffer(name, "recv", recv, total(recv_counts));
    const bool even = std::all_of(recv_counts.begin(), recv_counts.end(), [&](std::size_t c) { return c == send_count; });
    if (impl_->shm && even) {
        return issue_shm(impl_, name, detail::ShmCollectives::Kind::allgather, send, recv, send_count, dtype);
    }
    return issue(impl_, name, all_ranks(size()), [&](ccl::communicator& comm) {
        return ccl::allgatherv(send, send_count, recv, recv_counts, detail::to_ccl(dtype), comm);
    });
}

Request Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, ReduceOp op) {
    const char* name = "reduce_scatter";
    check_buffer(name, "send", send, recv_count * static_cast<std::size_t>(size()));
    check_buffer(name, "recv", recv, recv_count);
    check_reduction(name, dtype, op);
    if (impl_->shm && impl_->shm->fits(detail::ShmCollectives::Kind::reduce_scatter, dtype)) {
        return issue_shm(impl_, name, detail::ShmCollectives::Kind::reduce_scatter, send, recv, recv_count, dtype, op, 0,
                         avg_finish(op, recv, recv_count, dtype, size()));
    }
    if (drops_nan(dtype, op)) {
        return issue_nan_aware(impl_, name, recv, true, recv_count, dtype, op, [&](ccl::communicator& comm, void* rows) {
            return ccl::alltoall(send ? send : scratch(), rows, recv_count, detail::to_ccl(dtype), comm);
        });
    }
    return issue(impl_, name, all_ranks(size()), [&](ccl::communicator& comm) {
        return ccl::reduce_scatter(send, recv, recv_count, detail::to_ccl(dtype), engine_op(op), comm);
    }, avg_finish(op, recv, recv_count, dtype, size()));
}

Request Communicator::alltoall(const void* send, void* recv, std::size_t count, DType dtype) {
    const char* name = "alltoall";
    check_buffer(name, "send", send, count * static_cast<std::size_t>(size()));
    check_buffer(name, "recv", recv, count * static_cast<std::size_t>(size()));
    return issue(impl_, name, all_ranks(size()), [&](ccl::communicator& comm) {
        return ccl::alltoall(send, recv, count, detail::to_ccl(dtype), comm);
    });
}

Request Communicator::alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                                const std::vector<std::size_t>& recv_counts, DType dtype) {
    const char* name = "alltoallv";
    check_counts(*impl_, name, "send_counts", send_counts);
    check_counts(*impl_, name, "recv_counts", recv_counts);
    check_buffer(name, "send", send, total(send_counts));
    check_buffer(name, "recv", recv, total(recv_counts));
    return issue(impl_, name, all_ranks(size()), [&](ccl::communicator& comm) {
        return ccl::alltoallv(send ? send : scratch(), send_counts, recv ? recv : scratch(), recv_counts,
                              detail::to_ccl(dtype), comm);
    });
}

Request Communicator::gather(const void* send, void* recv, std::size_t count, DType dtype, int root) {
    const char* name = "gather";
    check_rank(*impl_, name, "root", root);
    check_buffer(name, "send", send, count);
    const bool is_root = rank() == root;
    if (is_root) check_buffer(name, "recv", recv, count * static_cast<std::size_t>(size()));
    const AlltoallvCounts counts = gather_as_alltoallv(size(), rank(), root, count);
    return issue(impl_, name, all_ranks(size()), [&](ccl::communicator& comm) {
        return ccl::alltoallv(send ? send : scratch(), counts.send, is_root && recv ? recv : scratch(), counts.recv,
                              detail::to_ccl(dtype), comm);
    });
}

Request Communicator::scatter(const void* send, void* recv, std::size_t count, DType dtype, int root) {
    const char* name = "scatter";
    check_rank(*impl_, name, "root", root);
    check_buffer(name, "recv", recv, count);
    const bool is_root = rank() == root;
    if (is_root) check_buffer(name, "send", send, count * static_cast<std::size_t>(size()));
    const AlltoallvCounts counts = scatter_as_alltoallv(size(), rank(), root, count);
    return issue(impl_, name, all_ranks(size()), [&](ccl::communicator& comm) {
        return ccl::alltoallv(is_root && send ? send : scratch(), counts.send, recv ? recv : scratch(), counts.recv,
                              detail::to_ccl(dtype), comm);
    });
}

Request Communicator::send(const void* buffer, std::size_t count, DType dtype, int peer) {
    const char* name = "send";
    check_rank(*impl_, name, "peer", peer);
    if (peer == rank()) throw InvalidArgument("send: peer " + std::to_string(peer) + " is this rank; send to a different rank");
    check_buffer(name, "buffer", buffer, count);
    return issue(impl_, name, "rank " + std::to_string(peer), [&](ccl::communicator& comm) {
        return ccl::send(const_cast<void*>(buffer), count, detail::to_ccl(dtype), peer, comm);
    });
}

Request Communicator::recv(void* buffer, std::size_t count, DType dtype, int peer) {
    const char* name = "recv";
    check_rank(*impl_, name, "peer", peer);
    if (peer == rank()) throw InvalidArgument("recv: peer " + std::to_string(peer) + " is this rank; receive from a different rank");
    check_buffer(name, "buffer", buffer, count);
    return issue(impl_, name, "rank " + std::to_string(peer), [&](ccl::communicator& comm) {
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
        return issue_shm(impl_, name, detail::ShmCollectives::Kind::allreduce, token.get(), token.get(), 1,
                         DType::int32, ReduceOp::sum, 0, keep_token);
    }
    return issue(impl_, name, all_ranks(size()), [&](ccl::communicator& comm) {
        return ccl::allreduce(token.get(), token.get(), 1, detail::to_ccl(DType::int32), engine_op(ReduceOp::sum), comm);
    }, keep_token);
}

// ---- sub-communicators -------------------------------------------------------------------------------------

std::shared_ptr<Communicator> Communicator::subgroup(const std::vector<int>& ranks, const std::string& name) {
    const char* op = "subgroup";
    impl_->throw_if_aborted(op);
    if (ranks.empty()) throw InvalidArgument("subgroup: the list of ranks is empty");
    std::vector<bool> seen(static_cast<std::size_t>(size()), false);
    std::string key;
    for (int r : ranks) {
        check_rank(*impl_, op, "rank", r);
        if (seen[static_cast<std::size_t>(r)]) throw InvalidArgument("subgroup: rank " + std::to_string(r) + " is listed twice");
        seen[static_cast<std::size_t>(r)] = true;
        key += "_" + std::to_string(r);
    }
    const int index = impl_->subgroups_made++;
    auto me = std::find(ranks.begin(), ranks.end(), rank());
    if (me == ranks.end()) return nullptr;
    CommunicatorOptions options = impl_->options;
    options.name = name.empty() ? impl_->options.name + "/sub" + std::to_string(index) : name;
    auto store = std::make_shared<PrefixStore>("ccl_core/sub" + std::to_string(index) + key, impl_->store);
    return create(std::move(store), static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()), options);
}

}  // namespace ccl_core
