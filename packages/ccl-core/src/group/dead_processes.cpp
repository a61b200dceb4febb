#include "dead_processes.hpp"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <cstdio>
#include <string>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

namespace ccl_core::detail {

bool process_is_gone(pid_t pid) {
    if (::kill(pid, 0) != 0) return errno == ESRCH;
    // a zombie (exited, not yet reaped by its launcher) holds no mappings any more
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto paren = line.rfind(')');
    return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

namespace {

void remove_regions_of(pid_t pid) {
    const std::string prefix = std::to_string(pid) + ":";
    DIR* dir = ::opendir("/dev/shm");
    if (!dir) return;
    while (dirent* e = ::readdir(dir)) {
        const std::string name = e->d_name;
        if (name.compare(0, prefix.size(), prefix) == 0) ::unlink(("/dev/shm/" + name).c_str());
    }
    ::closedir(dir);
}

}  // namespace

void remove_shm_of_dead_processes(const std::vector<pid_t>& peers) {
    for (pid_t pid : peers) {
        if (pid > 0 && process_is_gone(pid)) remove_regions_of(pid);
    }
}

void remove_own_shm_at_exit() {
    static std::once_flag once;
    std::call_once(once, [] { std::atexit([] { remove_regions_of(::getpid()); }); });
}

}  // namespace ccl_core::detail
