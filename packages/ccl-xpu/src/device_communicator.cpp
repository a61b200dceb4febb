#include <ccl_xpu/device_communicator.hpp>

#include <ccl_core/errors.hpp>
#include <ccl_core/oneccl/store_kvs.hpp>
#include <ccl_core/runtime.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

namespace ccl_xpu {

using ccl_core::DType;
using ccl_core::ReduceOp;
using ccl_core::Request;

class DeviceCommunicator::Impl {
public:
    int rank = 0;
    int size = 0;
    ccl_core::CommunicatorOptions options;
    QueueSource queues;
    std::shared_ptr<ccl::kvs_interface> kvs;
    std::unique_ptr<ccl::communicator> comm;
    std::mutex mutex;
    std::map<const sycl::queue*, ccl::stream> streams;  // one oneCCL stream per queue ops were ordered on
    sycl::event last;
    bool blocking_wait = true;  // CCL_BLOCKING_WAIT (see wait() below)
    void* scratch = nullptr;  // a valid device address for buffers of zero elements (gather/scatter)
    sycl::context scratch_context;

    std::string describe() const {
        return "device communicator '" + options.name + "' (rank " + std::to_string(rank) + " of " +
               std::to_string(size) + ")";
    }
};

namespace {

// A device op in flight: oneCCL's event, whose native SYCL event completes when the queue has run the op.
class DeviceOperation final : public ccl_core::PendingOperation,
                              public std::enable_shared_from_this<DeviceOperation> {
public:
    DeviceOperation(std::shared_ptr<DeviceCommunicator::Impl> comm, std::string op, ccl::event event)
        : comm_(std::move(comm)), op_(std::move(op)), event_(std::move(event)) {}
    ~DeviceOperation() override {
        if (!done_) new ccl::event(std::move(event_));  // oneCCL's destructor would wait for it: keep it instead
    }

    bool test() override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!done_) {
            try {
                done_ = event_.test();
            } catch (const std::exception& e) {
                throw ccl_core::BackendError(op_ + " on " + comm_->describe() + " failed in oneCCL: " + e.what());
            }
        }
        return done_;
    }
    // CCL_BLOCKING_WAIT=0 (as in the original bindings): return at once, because the op is already ordered on the
    // queue it was issued on, so later work on that queue (torch: the current stream) runs after it.
    void wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) override {
        if (!comm_->blocking_wait) return;
        const auto limit = timeout.value_or(comm_->options.timeout);
        const auto start = std::chrono::steady_clock::now();
        auto next_callback = start + std::chrono::milliseconds(50);
        while (!test()) {
            const auto now = std::chrono::steady_clock::now();
            if (now - start >= limit) {
                throw ccl_core::Timeout(op_ + " on " + comm_->describe() + " did not complete within " +
                                        std::to_string(limit.count()) + " ms: a peer died, hangs, or did not call " + op_);
            }
            if (every_50ms && now >= next_callback) {
                next_callback = now + std::chrono::milliseconds(50);
                every_50ms();
            }
            std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
    }
    bool completed() const override {
        std::lock_guard<std::mutex> lock(mutex_);
        return done_;
    }
    const std::string& op_name() const override { return op_; }
    // async_op=True: ccl-core's progress thread polls oneCCL's event (oneCCL runs without its worker thread)
    void move_in_background() override {
        if (!completed()) ccl_core::progress_in_background(shared_from_this());
    }

private:
    std::shared_ptr<DeviceCommunicator::Impl> comm_;
    std::string op_;
    ccl::event event_;
    mutable std::mutex mutex_;
    bool done_ = false;
};

void check_rank(const DeviceCommunicator::Impl& c, const char* op, const char* what, int r) {
    if (r < 0 || r >= c.size) {
        throw ccl_core::InvalidArgument(std::string(op) + ": " + what + " " + std::to_string(r) +
                                        " is out of range for a group of " + std::to_string(c.size) + " rank(s)");
    }
}

ccl::reduction device_reduction(const char* op, ReduceOp r) {
    if (r == ReduceOp::avg) {
        throw ccl_core::Unsupported(std::string(op) + ": avg is not offered on device memory; reduce with sum and "
                                    "divide (the torch backend does this on the device)");
    }
    return ccl_core::detail::to_ccl(r);
}

// Issue on the queue the source names now, under the communicator's lock (oneCCL streams are cached per queue).
template <class Start>
Request issue(const std::shared_ptr<DeviceCommunicator::Impl>& c, const char* op, Start&& start) {
    std::lock_guard<std::mutex> lock(c->mutex);
    sycl::queue& queue = c->queues();
    auto found = c->streams.find(&queue);
    if (found == c->streams.end()) found = c->streams.emplace(&queue, ccl::create_stream(queue)).first;
    ccl::event event;
    try {
        event = start(*c->comm, found->second);
    } catch (const std::exception& e) {
        throw ccl_core::BackendError(std::string(op) + " on " + c->describe() + ": oneCCL refused the operation: " +
                                     e.what());
    }
    c->last = event.get_native();
    return Request(std::make_shared<DeviceOperation>(c, op, std::move(event)));
}

}  // namespace

std::shared_ptr<DeviceCommunicator> DeviceCommunicator::create(std::shared_ptr<ccl_core::Store> store, int rank,
                                                               int size, const ccl_core::CommunicatorOptions& options,
                                                               QueueSource queues) {
    if (!store) throw ccl_core::InvalidArgument("DeviceCommunicator::create: store is null");
    if (!queues) throw ccl_core::InvalidArgument("DeviceCommunicator::create: no queue source");
    if (size < 1 || rank < 0 || rank >= size) {
        throw ccl_core::InvalidArgument("DeviceCommunicator::create: rank " + std::to_string(rank) +
                                        " is out of range for size " + std::to_string(size));
    }
    const std::string problem = device_path_problem();
    if (!problem.empty()) throw ccl_core::Unsupported("ccl-xpu: " + problem);
    ccl_core::initialize_runtime();

    auto impl = std::make_shared<Impl>();
    impl->rank = rank;
    impl->size = size;
    impl->options = options;
    impl->queues = std::move(queues);
    const char* blocking = std::getenv("CCL_BLOCKING_WAIT");
    impl->blocking_wait = !(blocking && std::string(blocking) == "0");

    // Every rank first announces itself, so that a missing one is named instead of oneCCL waiting for it.
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    store->set("ccl_xpu/joined/" + std::to_string(rank), ccl_core::Bytes{1});
    std::string missing;
    for (int r = 0; r < size; ++r) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        try {
            store->get("ccl_xpu/joined/" + std::to_string(r), std::max(std::chrono::milliseconds(0), left));
        } catch (const ccl_core::Timeout&) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
    }
    if (!missing.empty()) {
        throw ccl_core::Timeout("bootstrap of " + impl->describe() + ": rank(s) " + missing + " did not join within " +
                                std::to_string(options.timeout.count()) + " ms");
    }
    try {
        sycl::queue& queue = impl->queues();
        auto device = ccl::create_device(queue.get_device());
        auto context = ccl::create_context(queue.get_context());
        impl->kvs = std::make_shared<ccl_core::detail::StoreKvs>(
            std::make_shared<ccl_core::PrefixStore>("ccl_xpu/oneccl", store), 0);
        impl->comm = std::make_unique<ccl::communicator>(ccl::create_communicator(size, rank, device, context, impl->kvs));
        impl->scratch_context = queue.get_context();
        impl->scratch = sycl::malloc_device(64, queue);
    } catch (const sycl::exception& e) {
        throw ccl_core::BackendError("bootstrap of " + impl->describe() + ": SYCL error: " + e.what());
    } catch (const ccl::exception& e) {
        throw ccl_core::BackendError("bootstrap of " + impl->describe() + ": oneCCL could not create the communicator: " +
                                     e.what());
    }
    return std::shared_ptr<DeviceCommunicator>(new DeviceCommunicator(std::move(impl)));
}

DeviceCommunicator::DeviceCommunicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeviceCommunicator::~DeviceCommunicator() {
    if (impl_ && impl_->scratch) sycl::free(impl_->scratch, impl_->scratch_context);
}

int DeviceCommunicator::rank() const { return impl_->rank; }
int DeviceCommunicator::size() const { return impl_->size; }

sycl::event DeviceCommunicator::last_event() const {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    return impl_->last;
}

namespace dt = ccl_core::detail;

Request DeviceCommunicator::allreduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) {
    const auto red = device_reduction("allreduce", op);
    return issue(impl_, "allreduce", [&](ccl::communicator& comm, ccl::stream& s) {
        return ccl::allreduce(send, recv, count, dt::to_ccl(dtype), red, comm, s);
    });
}

Request DeviceCommunicator::reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, int root) {
    check_rank(*impl_, "reduce", "root", root);
    const auto red = device_reduction("reduce", op);
    return issue(impl_, "reduce", [&](ccl::communicator& comm, ccl::stream& s) {
        return ccl::reduce(send, recv, count, dt::to_ccl(dtype), red, root, comm, s);
    });
}

Request DeviceCommunicator::broadcast(void* buffer, std::size_t count, DType dtype, int root) {
    check_rank(*impl_, "broadcast", "root", root);
    return issue(impl_, "broadcast", [&](ccl::communicator& comm, ccl::stream& s) {
        return ccl::broadcast(buffer, count, dt::to_ccl(dtype), root, comm, s);
    });
}

Request DeviceCommunicator::allgather(const void* send, void* recv, std::size_t count, DType dtype) {
    return allgatherv(send, count, recv, std::vector<std::size_t>(static_cast<std::size_t>(size()), count), dtype);
}

Request DeviceCommunicator::allgatherv(const void* send, std::size_t send_count, void* recv,
                                       const std::vector<std::size_t>& recv_counts, DType dtype) {
    if (recv_counts.size() != static_cast<std::size_t>(size())) {
        throw ccl_core::InvalidArgument("allgather: recv_counts needs one entry per rank (" + std::to_string(size()) + ")");
    }
    return issue(impl_, "allgather", [&](ccl::communicator& comm, ccl::stream& s) {
        return ccl::allgatherv(send, send_count, recv, recv_counts, dt::to_ccl(dtype), comm, s);
    });
}

Request DeviceCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype,
                                           ReduceOp op) {
    const auto red = device_reduction("reduce_scatter", op);
    return issue(impl_, "reduce_scatter", [&](ccl::communicator& comm, ccl::stream& s) {
        return ccl::reduce_scatter(send, recv, recv_count, dt::to_ccl(dtype), red, comm, s);
    });
}

Request DeviceCommunicator::alltoall(const void* send, void* recv, std::size_t count, DType dtype) {
    return issue(impl_, "alltoall", [&](ccl::communicator& comm, ccl::stream& s) {
        return ccl::alltoall(send, recv, count, dt::to_ccl(dtype), comm, s);
    });
}

Request DeviceCommunicator::alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                                      const std::vector<std::size_t>& recv_counts, DType dtype) {
    if (send_counts.size() != static_cast<std::size_t>(size()) || recv_counts.size() != static_cast<std::size_t>(size())) {
        throw ccl_core::InvalidArgument("alltoallv: send_counts and recv_counts need one entry per rank (" +
                                        std::to_string(size()) + ")");
    }
    void* scratch = impl_->scratch;
    return issue(impl_, "alltoallv", [&](ccl::communicator& comm, ccl::stream& s) {
        return ccl::alltoallv(send ? send : scratch, send_counts, recv ? recv : scratch, recv_counts,
                              dt::to_ccl(dtype), comm, s);
    });
}

Request DeviceCommunicator::gather(const void* send, void* recv, std::size_t count, DType dtype, int root) {
    check_rank(*impl_, "gather", "root", root);
    const auto counts = ccl_core::gather_as_alltoallv(size(), rank(), root, count);
    return alltoallv(send, counts.send, rank() == root ? recv : nullptr, counts.recv, dtype);
}

Request DeviceCommunicator::scatter(const void* send, void* recv, std::size_t count, DType dtype, int root) {
    check_rank(*impl_, "scatter", "root", root);
    const auto counts = ccl_core::scatter_as_alltoallv(size(), rank(), root, count);
    return alltoallv(rank() == root ? send : nullptr, counts.send, recv, counts.recv, dtype);
}

Request DeviceCommunicator::send(const void* buffer, std::size_t count, DType dtype, int peer) {
    check_rank(*impl_, "send", "peer", peer);
    return issue(impl_, "send", [&](ccl::communicator& comm, ccl::stream& s) {
        return ccl::send(const_cast<void*>(buffer), count, dt::to_ccl(dtype), peer, comm, s);
    });
}

Request DeviceCommunicator::recv(void* buffer, std::size_t count, DType dtype, int peer) {
    check_rank(*impl_, "recv", "peer", peer);
    return issue(impl_, "recv", [&](ccl::communicator& comm, ccl::stream& s) {
        return ccl::recv(buffer, count, dt::to_ccl(dtype), peer, comm, s);
    });
}

Request DeviceCommunicator::barrier() {
    return issue(impl_, "barrier", [&](ccl::communicator& comm, ccl::stream& s) { return ccl::barrier(comm, s); });
}

}  // namespace ccl_xpu
