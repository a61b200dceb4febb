// Registered memory for torch: tensors whose storage lies in shared memory every rank of the group can read, so that
// collectives on them read their peers' tensors in place (ccl-core's Communicator::allocate).
#include "process_group_ccl.hpp"
#include "torch_errors.hpp"

namespace ccl_torch {

bool ProcessGroupCCL::has_registered_memory() const {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    return comm_ && comm_->shared_memory();
}

bool ProcessGroupCCL::supportsTensorAlloc(c10::DeviceIndex /*device_index*/) { return has_registered_memory(); }

at::Tensor ProcessGroupCCL::allocateTensor(long size, at::TensorOptions options) {
    CCL_CHECK_ARGUMENT(size >= 0, "allocateTensor: size must be >= 0, got ", size);
    CCL_CHECK_ARGUMENT(!options.has_device() || options.device().is_cpu(), "allocateTensor: this ccl group allocates "
                       "CPU tensors, got device ", options.device());
    options = options.device(c10::kCPU);
    const auto bytes = static_cast<std::size_t>(size) * c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
    auto comm = communicator("allocateTensor");
    std::shared_ptr<void> memory = comm->allocate(bytes);
    if (!memory) return at::empty({size}, options);  // no shared-memory path here: ops copy as usual
    void* data = memory.get();
    return at::from_blob(data, {size}, [memory = std::move(memory)](void*) mutable { memory.reset(); }, options);
}

bool ProcessGroupCCL::registered(const at::Tensor& t) const {
    if (!t.defined() || !t.device().is_cpu() || !t.is_contiguous()) return false;
    std::shared_ptr<ccl_core::Communicator> comm;
    {
        std::lock_guard<std::mutex> lock(comm_mutex_);
        comm = comm_;
    }
    return comm && comm->registered(t.data_ptr(), static_cast<std::size_t>(t.nbytes()));
}

}  // namespace ccl_torch
