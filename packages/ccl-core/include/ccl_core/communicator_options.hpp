// What every communicator is made with, host or device.
#pragma once

#include <chrono>
#include <string>

namespace ccl_core {

struct CommunicatorOptions {
    // Bound on bootstrap and the default bound on every operation (from its issue).
    std::chrono::milliseconds timeout{std::chrono::minutes(30)};
    // Shown in error messages ("group 'tp'").
    std::string name = "default";
};

}  // namespace ccl_core
