// How a device plugin (ccl-xpu) gives the `ccl` backend another device type. ccl-torch knows nothing of the
// device: for a tensor of a registered device type it asks the plugin, once per process group, for the
// ccl_core::Collectives that run on that device's memory, and then runs every op exactly as on CPU.
//
// Registration crosses Python: the plugin's module hands a capsule named kDevicePluginCapsule that holds a
// heap-allocated std::shared_ptr<DevicePlugin> to oneccl_bindings_for_pytorch._register_device_plugin(name, capsule).
// Both sides must be built with the same compiler and torch (a C++ interface, no C ABI).
#pragma once

#include <ccl_core/collectives.hpp>
#include <ccl_core/communicator.hpp>
#include <ccl_core/store.hpp>

#include <c10/core/Device.h>

#include <memory>
#include <string>

namespace ccl_torch {

inline constexpr const char* kDevicePluginCapsule = "ccl_torch.DevicePlugin";

class DevicePlugin {
public:
    virtual ~DevicePlugin() = default;
    // "ccl-xpu 0.1.0": shown in error messages and by oneccl_bindings_for_pytorch.device_plugins().
    virtual std::string description() const = 0;
    // Throws with a message for the user when `device` cannot run collectives in this process (no such device,
    // no driver, ...). Called before every op on the device, so it must be cheap once it has succeeded.
    virtual void check_usable(const c10::Device& device) const = 0;
    // Collective over the group: every rank calls it at the group's first op on this device type. `store` is the
    // group's own (prefixed) store.
    virtual std::shared_ptr<ccl_core::Collectives> create(std::shared_ptr<ccl_core::Store> store, int rank, int size,
                                                          const ccl_core::CommunicatorOptions& options,
                                                          const c10::Device& device) = 0;
};

}  // namespace ccl_torch
