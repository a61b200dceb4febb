// Collectives on device memory (SYCL USM), each ordered on a SYCL queue: a ccl-core group (rendezvous, waiting,
// timeouts, abort) and its oneCCL engine (issuing under its lock) with a device and a queue, and ccl-core's checks
// (validate.hpp). A DeviceCommunicator is a ccl_core::Collectives, so the torch backend runs every op on it as it does
// on CPU.
#pragma once

#include <ccl_core/collectives.hpp>
#include <ccl_core/communicator.hpp>
#include <ccl_core/store.hpp>

#include <sycl/sycl.hpp>

#include <functional>
#include <memory>
#include <string>

namespace ccl_xpu {

// The queue the next op is ordered on (under torch: the current XPU stream's queue). Every queue it returns must
// belong to the device and context the communicator was created with.
using QueueSource = std::function<sycl::queue&()>;

// What keeps oneCCL's device path from running in this process, or "" when nothing does. oneCCL needs a Level Zero
// loader that exports zesInit even for SYCL devices that are not Level Zero ones, and crashes without one: this is
// checked before any device communicator is made.
std::string device_path_problem();

class DeviceCommunicator final : public ccl_core::Collectives {
public:
    // Collective over `store`: every rank calls it; Timeout names the ranks that never arrived. Throws Unsupported
    // with device_path_problem() when oneCCL's device path cannot run here.
    static std::shared_ptr<DeviceCommunicator> create(std::shared_ptr<ccl_core::Store> store, int rank, int size,
                                                      const ccl_core::CommunicatorOptions& options, QueueSource queues);
    ~DeviceCommunicator() override;

    int rank() const override;
    int size() const override;
    // Set after a timeout, a dead peer or an interrupted wait (as on host communicators): every later call throws
    // CommunicatorAborted.
    bool aborted() const;
    void abort(const std::string& reason) override;

    // The collectives of ccl_core/collectives.hpp on USM pointers of the communicator's context. avg is not offered
    // (oneCCL has no device-side avg on every version; the torch layer sums and divides on the device).
    ccl_core::Request allreduce(const void* send, void* recv, std::size_t count, ccl_core::DType dtype,
                                ccl_core::ReduceOp op) override;
    ccl_core::Request reduce(const void* send, void* recv, std::size_t count, ccl_core::DType dtype,
                             ccl_core::ReduceOp op, int root) override;
    ccl_core::Request broadcast(void* buffer, std::size_t count, ccl_core::DType dtype, int root) override;
    ccl_core::Request allgather(const void* send, void* recv, std::size_t count, ccl_core::DType dtype) override;
    ccl_core::Request allgatherv(const void* send, std::size_t send_count, void* recv,
                                 const std::vector<std::size_t>& recv_counts, ccl_core::DType dtype) override;
    ccl_core::Request reduce_scatter(const void* send, void* recv, std::size_t recv_count, ccl_core::DType dtype,
                                     ccl_core::ReduceOp op) override;
    ccl_core::Request alltoall(const void* send, void* recv, std::size_t count, ccl_core::DType dtype) override;
    ccl_core::Request alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                                const std::vector<std::size_t>& recv_counts, ccl_core::DType dtype) override;
    ccl_core::Request gather(const void* send, void* recv, std::size_t count, ccl_core::DType dtype, int root) override;
    ccl_core::Request scatter(const void* send, void* recv, std::size_t count, ccl_core::DType dtype, int root) override;
    ccl_core::Request send(const void* buffer, std::size_t count, ccl_core::DType dtype, int peer) override;
    ccl_core::Request recv(void* buffer, std::size_t count, ccl_core::DType dtype, int peer) override;
    ccl_core::Request barrier() override;

    class Impl;

private:
    explicit DeviceCommunicator(std::shared_ptr<Impl> impl);
    std::shared_ptr<Impl> impl_;
};

}  // namespace ccl_xpu
