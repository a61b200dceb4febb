// Whether oneCCL's device path can run in this process (see device_path_problem() in the header).
#include <ccl_xpu/device_communicator.hpp>

#include <cstdlib>
#include <string>

#include <dlfcn.h>

namespace ccl_xpu {

std::string device_path_problem() {
    // oneCCL opens the loader by this name and looks up zes* entry points at its first device communicator.
    // CCL_XPU_ZE_LOADER names a loader of the user's instead (one outside the library path): opened globally and
    // kept, it is the one oneCCL's own dlopen of the name then finds.
    if (const char* path = std::getenv("CCL_XPU_ZE_LOADER"); path && *path) {
        void* chosen = ::dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (!chosen) {
            const char* why = ::dlerror();
            return std::string("CCL_XPU_ZE_LOADER=") + path + " cannot be loaded: " + (why ? why : "unknown error");
        }
        if (!::dlsym(chosen, "zesInit")) {
            return std::string("CCL_XPU_ZE_LOADER=") + path + " does not export zesInit (a Level Zero loader >= 1.9 does)";
        }
        return "";
    }
    void* loader = ::dlopen("libze_loader.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!loader) {
        return "oneCCL's device path needs the Level Zero loader (libze_loader.so.1), which is not installed "
               "(Intel GPU machines have it with the GPU driver; Debian/Ubuntu package libze1)";
    }
    const bool has_sysman = ::dlsym(loader, "zesInit") != nullptr;
    ::dlclose(loader);
    if (!has_sysman) {
        return "oneCCL's device path needs a Level Zero loader that exports zesInit; the installed "
               "libze_loader.so.1 is too old (Debian 12's libze1 1.8.12 is; install a loader from Intel's GPU "
               "driver packages)";
    }
    return "";
}

}  // namespace ccl_xpu
