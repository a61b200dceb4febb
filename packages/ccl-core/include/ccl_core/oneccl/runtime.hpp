// Runtime set-up of oneCCL: our defaults for its environment variables (applied only where the user has
// not set them, before oneCCL first reads them), and facts about the loaded library for diagnostics.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ccl_core {

struct EnvDefault {
    std::string name;
    std::string value;
    std::string why;
};

// The variables ccl-core sets when unset; docs/environment.md lists the same (checked by tests/docs).
const std::vector<EnvDefault>& env_defaults();

// Applies env_defaults() and initialises oneCCL once per process. Called by Communicator::create;
// safe to call early and from several threads.
void initialize_runtime();

// Current value of each variable of env_defaults() as the process sees it ("" when unset).
std::vector<std::pair<std::string, std::string>> effective_environment();

// "2021.16.2" etc., as the loaded oneCCL reports it.
std::string oneccl_version();
// Full path of the loaded libccl (empty if it cannot be determined).
std::string oneccl_library_path();

}  // namespace ccl_core
