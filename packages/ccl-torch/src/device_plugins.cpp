#include "device_plugins.hpp"

#include <mutex>

namespace ccl_torch {
namespace {

std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
}
std::map<c10::DeviceType, std::shared_ptr<DevicePlugin>>& registry() {
    static std::map<c10::DeviceType, std::shared_ptr<DevicePlugin>> plugins;
    return plugins;
}

}  // namespace

void register_device_plugin(c10::DeviceType type, std::shared_ptr<DevicePlugin> plugin) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry()[type] = std::move(plugin);
}

std::shared_ptr<DevicePlugin> device_plugin(c10::DeviceType type) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(type);
    return it == registry().end() ? nullptr : it->second;
}

std::map<std::string, std::string> device_plugins() {
    std::lock_guard<std::mutex> lock(registry_mutex());
    std::map<std::string, std::string> out;
    for (const auto& [type, plugin] : registry()) out[c10::DeviceTypeName(type, true)] = plugin->description();
    return out;
}

}  // namespace ccl_torch
