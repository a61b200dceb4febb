// Device collectives: ccl-core's oneCCL engine plus a SYCL queue (device_communicator.hpp).
#include <ccl_xpu/device_communicator.hpp>

#include <ccl_core/errors.hpp>
#include <ccl_core/oneccl/engine.hpp>
#include <ccl_core/oneccl/runtime.hpp>
#include <ccl_core/validate.hpp>

#include <cstdlib>
#include <map>
#include <mutex>

namespace ccl_xpu {

using ccl_core::DType;
using ccl_core::Engine;
using ccl_core::ReduceOp;
using ccl_core::Request;

// The device's part: the queues ops are ordered on, one oneCCL stream per queue, and a scratch address. Waiting,
// timeouts and abort are the group's, the engine lock the engine's, the checks ccl-core's (validate.hpp).
class DeviceCommunicator::Impl : public std::enable_shared_from_this<DeviceCommunicator::Impl> {
public:
    std::shared_ptr<Engine> engine;
    QueueSource queues;
    std::mutex streams_mutex;
    std::map<const sycl::queue*, ccl::stream> streams;  // one oneCCL stream per queue ops were ordered on
    sycl::context context;  // of the queue the communicator was made with: every buffer must belong to it
    void* scratch = nullptr;  // a valid device address for buffers of zero elements (gather/scatter)

    ~Impl() {
        // after an abort an op that never ends may hold it, and the runtime's free would wait for that op
        if (scratch && !(engine && group().aborted())) sycl::free(scratch, context);
    }

    ccl_core::Group& group() const { return *engine->group(); }

    // The checks every collective makes (ccl_core/validate.hpp), plus: a buffer must be USM memory of the
    // communicator's context. oneCCL would otherwise read or write through a host pointer on the device (or another
    // context's memory) and fail deep inside the queue, or crash.
    void validate(const ccl_core::OpArgs& a) const {
        ccl_core::validate(a, group().rank(), group().size(), [this](const char* op, const char* name, const void* p,
                                                                      std::size_t count) {
            if (count == 0 || p == nullptr) return;
            if (sycl::get_pointer_type(p, context) == sycl::usm::alloc::unknown) {
                throw ccl_core::InvalidArgument(std::string(op) + ": " + name + " is not USM memory of the "
                                                "communicator's SYCL context (allocate it with "
                                                "sycl::malloc_device/shared/host on that context, or pass a tensor on "
                                                "the communicator's device)");
            }
        });
    }

    // Checks `a`, then issues it on the queue the source names now (under torch: the caller's current stream, so it
    // is asked here, on the caller's thread). oneCCL's SYCL build runs each call to completion, so the engine makes
    // the call on its blocking-call thread (EngineSettings::calls_block): `start` must capture by value.
    Request issue(const ccl_core::OpArgs& a, std::function<ccl::event(ccl::communicator&, ccl::stream&)> start) {
        validate(a);
        const bool one_peer = a.kind == ccl_core::OpKind::send || a.kind == ccl_core::OpKind::recv;
        std::string peers = one_peer ? "rank " + std::to_string(a.root) : group().all_ranks();
        ccl::stream* stream = nullptr;
        {
            sycl::queue& queue = queues();
            std::lock_guard<std::mutex> lock(streams_mutex);
            auto found = streams.find(&queue);
            if (found == streams.end()) found = streams.emplace(&queue, ccl::create_stream(queue)).first;
            stream = &found->second;  // map nodes stay put
        }
        return engine->issue(ccl_core::op_name(a.kind), std::move(peers),
                             [self = shared_from_this(), stream, start](ccl::communicator& comm) {
                                 return start(comm, *stream);
                             });
    }
};

namespace {

ccl::reduction device_reduction(const char* op, ReduceOp r) {
    if (r == ReduceOp::avg) {
        throw ccl_core::Unsupported(std::string(op) + ": avg is not offered on device memory; reduce with sum and "
                                    "divide (the torch backend does this on the device)");
    }
    return ccl_core::detail::to_ccl(r);
}

}  // namespace

std::shared_ptr<DeviceCommunicator> DeviceCommunicator::create(std::shared_ptr<ccl_core::Store> store, int rank,
                                                               int size, const ccl_core::CommunicatorOptions& options,
                                                               QueueSource queues) {
    if (!queues) throw ccl_core::InvalidArgument("DeviceCommunicator::create: no queue source");
    const std::string problem = device_path_problem();
    if (!problem.empty()) throw ccl_core::Unsupported("ccl-xpu: " + problem);

    auto impl = std::make_shared<Impl>();
    impl->queues = std::move(queues);
    ccl_core::EngineSettings settings;
    const char* blocking = std::getenv("CCL_BLOCKING_WAIT");
    settings.wait_for_completion = !(blocking && std::string(blocking) == "0");
    settings.calls_block = true;  // oneCCL's SYCL build over OFI runs every op inside its call (see Impl::issue)
    sycl::queue* first = nullptr;
    try {
        first = &impl->queues();
        impl->context = first->get_context();
    } catch (const sycl::exception& e) {
        throw ccl_core::BackendError("DeviceCommunicator::create: the queue source failed: " + std::string(e.what()));
    }
    settings.connect = [first](int n, int r, const std::shared_ptr<ccl::kvs_interface>& kvs) {
        auto device = ccl::create_device(first->get_device());
        auto context = ccl::create_context(first->get_context());
        return ccl::create_communicator(n, r, device, context, kvs);
    };
    ccl_core::initialize_runtime();
    impl->engine = Engine::create(ccl_core::Group::join(std::move(store), rank, size, options,
                                                        {"device communicator", "ccl_xpu"}),
                                  std::move(settings));
    try {
        impl->scratch = sycl::malloc_device(64, *first);
    } catch (const sycl::exception& e) {
        throw ccl_core::BackendError("bootstrap of " + impl->group().describe() + ": SYCL error: " + e.what());
    }
    return std::shared_ptr<DeviceCommunicator>(new DeviceCommunicator(std::move(impl)));
}

DeviceCommunicator::DeviceCommunicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceCommunicator::~DeviceCommunicator() {
    // the last call's thread may still hold the engine (and this Impl): its collective destruction belongs here
    if (impl_ && impl_->engine) impl_->engine->settle_blocking_calls();
}

int DeviceCommunicator::rank() const { return impl_->group().rank(); }
int DeviceCommunicator::size() const { return impl_->group().size(); }
bool DeviceCommunicator::aborted() const { return impl_->group().aborted(); }
void DeviceCommunicator::abort(const std::string& reason) { impl_->group().abort(reason); }

namespace dt = ccl_core::detail;
using ccl_core::OpArgs;
using ccl_core::OpKind;
using Stream = ccl::stream;

Request DeviceCommunicator::allreduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) {
    const auto red = device_reduction("allreduce", op);
    return impl_->issue({OpKind::allreduce, send, recv, count, dtype, op}, [=](ccl::communicator& comm, Stream& s) {
        return ccl::allreduce(send, recv, count, dt::to_ccl(dtype), red, comm, s);
    });
}

Request DeviceCommunicator::reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, int root) {
    const auto red = device_reduction("reduce", op);
    return impl_->issue({OpKind::reduce, send, recv, count, dtype, op, root}, [=](ccl::communicator& comm, Stream& s) {
        return ccl::reduce(send, recv, count, dt::to_ccl(dtype), red, root, comm, s);
    });
}

Request DeviceCommunicator::broadcast(void* buffer, std::size_t count, DType dtype, int root) {
    return impl_->issue({OpKind::broadcast, buffer, buffer, count, dtype, ReduceOp::sum, root},
                        [=](ccl::communicator& comm, Stream& s) {
                            return ccl::broadcast(buffer, count, dt::to_ccl(dtype), root, comm, s);
                        });
}

Request DeviceCommunicator::allgather(const void* send, void* recv, std::size_t count, DType dtype) {
    return allgatherv(send, count, recv, std::vector<std::size_t>(static_cast<std::size_t>(size()), count), dtype);
}

Request DeviceCommunicator::allgatherv(const void* send, std::size_t send_count, void* recv,
                                       const std::vector<std::size_t>& recv_counts, DType dtype) {
    OpArgs a{OpKind::allgatherv, send, recv, send_count, dtype};
    a.recv_counts = &recv_counts;
    return impl_->issue(a, [=](ccl::communicator& comm, Stream& s) {
        return ccl::allgatherv(send, send_count, recv, recv_counts, dt::to_ccl(dtype), comm, s);
    });
}

Request DeviceCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype,
                                           ReduceOp op) {
    const auto red = device_reduction("reduce_scatter", op);
    return impl_->issue({OpKind::reduce_scatter, send, recv, recv_count, dtype, op},
                        [=](ccl::communicator& comm, Stream& s) {
                            return ccl::reduce_scatter(send, recv, recv_count, dt::to_ccl(dtype), red, comm, s);
                        });
}

Request DeviceCommunicator::alltoall(const void* send, void* recv, std::size_t count, DType dtype) {
    return impl_->issue({OpKind::alltoall, send, recv, count, dtype}, [=](ccl::communicator& comm, Stream& s) {
        return ccl::alltoall(send, recv, count, dt::to_ccl(dtype), comm, s);
    });
}

Request DeviceCommunicator::alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                                      const std::vector<std::size_t>& recv_counts, DType dtype) {
    OpArgs a{OpKind::alltoallv, send, recv, 0, dtype};
    a.send_counts = &send_counts;
    a.recv_counts = &recv_counts;
    void* scratch = impl_->scratch;
    return impl_->issue(a, [=](ccl::communicator& comm, Stream& s) {
        return ccl::alltoallv(send ? send : scratch, send_counts, recv ? recv : scratch, recv_counts,
                              dt::to_ccl(dtype), comm, s);
    });
}

// gather and scatter: the alltoallv in which only the root receives (gather) or sends (scatter).
Request DeviceCommunicator::gather(const void* send, void* recv, std::size_t count, DType dtype, int root) {
    impl_->validate({OpKind::gather, send, recv, count, dtype, ReduceOp::sum, root});
    const auto counts = ccl_core::gather_as_alltoallv(size(), rank(), root, count);
    return alltoallv(send, counts.send, rank() == root ? recv : nullptr, counts.recv, dtype);
}

Request DeviceCommunicator::scatter(const void* send, void* recv, std::size_t count, DType dtype, int root) {
    impl_->validate({OpKind::scatter, send, recv, count, dtype, ReduceOp::sum, root});
    const auto counts = ccl_core::scatter_as_alltoallv(size(), rank(), root, count);
    return alltoallv(rank() == root ? send : nullptr, counts.send, recv, counts.recv, dtype);
}

Request DeviceCommunicator::send(const void* buffer, std::size_t count, DType dtype, int peer) {
    return impl_->issue({OpKind::send, buffer, nullptr, count, dtype, ReduceOp::sum, peer},
                        [=](ccl::communicator& comm, Stream& s) {
                            return ccl::send(const_cast<void*>(buffer), count, dt::to_ccl(dtype), peer, comm, s);
                        });
}

Request DeviceCommunicator::recv(void* buffer, std::size_t count, DType dtype, int peer) {
    return impl_->issue({OpKind::recv, nullptr, buffer, count, dtype, ReduceOp::sum, peer},
                        [=](ccl::communicator& comm, Stream& s) {
                            return ccl::recv(buffer, count, dt::to_ccl(dtype), peer, comm, s);
                        });
}

Request DeviceCommunicator::barrier() {
    return impl_->issue({OpKind::barrier}, [=](ccl::communicator& comm, Stream& s) { return ccl::barrier(comm, s); });
}

}  // namespace ccl_xpu
