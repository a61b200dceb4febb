// The registry of device plugins (include/ccl_torch/device_plugin.hpp), filled from Python at import time.
#pragma once

#include <ccl_torch/device_plugin.hpp>

#include <c10/core/DeviceType.h>

#include <map>
#include <memory>
#include <string>

namespace ccl_torch {

void register_device_plugin(c10::DeviceType type, std::shared_ptr<DevicePlugin> plugin);
// nullptr when no plugin serves `type`.
std::shared_ptr<DevicePlugin> device_plugin(c10::DeviceType type);
// device type name -> plugin description
std::map<std::string, std::string> device_plugins();

}  // namespace ccl_torch
