// ccl_xpu._torch_plugin_2_X: the `xpu` device of ccl-torch's `ccl` backend (ccl_torch/device_plugin.hpp).
// Links no XPU library of torch (the CPU wheel has none, and a plugin linking them could not load there): the
// current XPU stream's queue and the availability check come from Python (torch.xpu), under the GIL.
#include <ccl_torch/device_plugin.hpp>
#include <ccl_xpu/device_communicator.hpp>

#include <ccl_core/errors.hpp>

#include <torch/csrc/utils/pybind.h>

#include <atomic>

namespace py = pybind11;

namespace {

constexpr const char* kHelpers = "ccl_xpu.torch_plugin";

class XpuPlugin final : public ccl_torch::DevicePlugin {
public:
    explicit XpuPlugin(std::string version) : version_(std::move(version)) {}

    std::string description() const override { return "ccl-xpu " + version_; }

    void check_usable(const c10::Device& device) const override {
        if (usable_.load()) return;
        py::gil_scoped_acquire gil;
        try {
            py::module_::import(kHelpers).attr("check_usable")(device.index());
        } catch (py::error_already_set& e) {
            throw ccl_core::Unsupported(e.what());
        }
        usable_.store(true);
    }

    std::shared_ptr<ccl_core::Collectives> create(std::shared_ptr<ccl_core::Store> store, int rank, int size,
                                                  const ccl_core::CommunicatorOptions& options,
                                                  const c10::Device& device) override {
        const int index = device.has_index() ? device.index() : -1;
        // Every op is ordered on the current stream of the device, as torch's own XPU collectives are.
        auto current_queue = [index]() -> sycl::queue& {
            py::gil_scoped_acquire gil;
            const auto address = py::module_::import(kHelpers).attr("current_queue")(index).cast<std::uintptr_t>();
            return *reinterpret_cast<sycl::queue*>(address);
        };
        return ccl_xpu::DeviceCommunicator::create(std::move(store), rank, size, options, current_queue);
    }

private:
    std::string version_;
    mutable std::atomic<bool> usable_{false};
};

}  // namespace

// Named for its torch minor (CCL_XPU_PLUGIN_MODULE, e.g. _torch_plugin_2_15: meson.build).
PYBIND11_MODULE(CCL_XPU_PLUGIN_MODULE, m) {
    m.doc() = "The xpu device plugin of the ccl backend (see ccl_xpu.torch_plugin)";
    m.def("capsule", [](const std::string& version) {
        auto* plugin = new std::shared_ptr<ccl_torch::DevicePlugin>(std::make_shared<XpuPlugin>(version));
        return py::capsule(plugin, ccl_torch::kDevicePluginCapsule, [](PyObject* o) {
            delete static_cast<std::shared_ptr<ccl_torch::DevicePlugin>*>(PyCapsule_GetPointer(o, ccl_torch::kDevicePluginCapsule));
        });
    }, "The plugin, in the capsule oneccl_bindings_for_pytorch._C._register_device_plugin expects");
}
