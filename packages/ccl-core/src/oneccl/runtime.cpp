#include <ccl_core/oneccl/runtime.hpp>

#include "../group/dead_processes.hpp"

#include "../kernels/elementwise.hpp"
#include "../settings.hpp"

#include <ccl_core/oneccl/convert.hpp>
#include <ccl_core/progress.hpp>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace ccl_core {

const std::vector<EnvDefault>& env_defaults() {
    static const std::vector<EnvDefault> defaults{
        {"CCL_WORKER_OFFLOAD", "0",
         "oneCCL's worker thread fights the caller for cores: every op then costs an ~8 ms scheduler quantum on "
         "small hosts; without it the waiting thread drives progress"},
        {"CCL_ATL_TRANSPORT", "ofi",
         "the KVS bootstrap needs no MPI; ATL/MPI without mpiexec makes every process rank 0"},
        {"CCL_ATL_SHM", "1",
         "adds libfabric's shared-memory provider for ranks on one host (about 2x tcp's bandwidth)"},
        {"FI_SHM_RX_SIZE", "256",
         "libfabric's shared-memory region per rank: 1024-entry queues (its default) make it 23 MiB plus 8 MiB of "
         "buffers, touched at start; 256 makes it 7 MiB with no loss of speed measured here"},
        {"FI_SHM_TX_SIZE", "256", "see FI_SHM_RX_SIZE"},
        {"CCL_PROCESS_LAUNCHER", "none",
         "our bootstrap does not use the launcher; oneCCL then counts a host's ranks itself, as under torchrun "
         "(with Hydra's MPI_LOCALNRANKS its shared-memory set-up failed for mpiexec across hosts)"},
        {"CCL_LOG_LEVEL", "error",
         "oneCCL warns about every variable above and about ordinary launches; errors still show"},
    };
    return defaults;
}

namespace {

// oneCCL announces the change of CCL_LOG_LEVEL at warn level (on stdout) while it is still parsing it; when
// we are the ones asking for "error", silence what it prints during init, to keep every rank's output clean.
// Errors are not lost: ccl::init reports them by throwing.
class QuietStdout {
public:
    explicit QuietStdout(bool enable) {
        if (!enable) return;
        std::fflush(stdout);
        saved_ = ::dup(STDOUT_FILENO);
        int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (saved_ >= 0 && devnull >= 0) ::dup2(devnull, STDOUT_FILENO);
        if (devnull >= 0) ::close(devnull);
    }
    ~QuietStdout() {
        if (saved_ < 0) return;
        std::fflush(stdout);
        ::dup2(saved_, STDOUT_FILENO);
        ::close(saved_);
    }

private:
    int saved_ = -1;
};

// libfabric's shared-memory provider (CCL_ATL_SHM=1) sizes its region with ftruncate and touches it later: on a
// /dev/shm too small for it the rank dies of SIGBUS, silently, and its peers wait out their timeout. So when
// /dev/shm has less room than a rank's region needs (7 MiB with our queue sizes; 16 MiB asked for headroom), and
// the user did not ask for CCL_ATL_SHM, oneCCL goes over tcp only, and says why.
constexpr unsigned long long kAtlShmNeeds = 16ull << 20;

void avoid_a_small_dev_shm() {
    if (std::getenv("CCL_ATL_SHM") != nullptr) return;  // the user's choice, or ours from an earlier check
    struct statvfs fs {};
    if (::statvfs("/dev/shm", &fs) != 0) return;
    const unsigned long long free_bytes = static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize;
    const unsigned long long size_bytes = static_cast<unsigned long long>(fs.f_blocks) * fs.f_frsize;
    if (free_bytes >= kAtlShmNeeds) return;
    ::setenv("CCL_ATL_SHM", "0", 1);
    std::fprintf(stderr, "[ccl_core] /dev/shm has %llu KiB free of %llu KiB, less than oneCCL's shared-memory "
                 "transport needs (%llu KiB per rank): oneCCL uses tcp between ranks on this host (CCL_ATL_SHM=0). "
                 "Give /dev/shm more room (docker run --shm-size=1g) for full speed.\n",
                 free_bytes >> 10, size_bytes >> 10, kAtlShmNeeds >> 10);
}

}  // namespace

void initialize_runtime() {
    (void)kernel_level();  // a bad CCL_CORE_KERNEL or CCL_CORE_PROGRESS fails here, on every rank, before any
    (void)progress_mode();  // communicator exists
    detail::check_settings();
    static std::once_flag once;
    std::call_once(once, [] {
        bool we_set_log_level = false;
        avoid_a_small_dev_shm();
        for (const auto& d : env_defaults()) {
            if (std::getenv(d.name.c_str()) == nullptr) {
                ::setenv(d.name.c_str(), d.value.c_str(), 0);
                we_set_log_level |= d.name == "CCL_LOG_LEVEL";
            }
        }
        QuietStdout quiet(we_set_log_level);
        ccl::init();
        detail::remove_own_shm_at_exit();
    });
}

std::vector<std::pair<std::string, std::string>> effective_environment() {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& d : env_defaults()) {
        const char* v = std::getenv(d.name.c_str());
        out.emplace_back(d.name, v ? v : "");
    }
    return out;
}

std::string oneccl_version() {
    return ccl::get_library_version().full;
}

std::string oneccl_library_path() {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&ccl::get_library_version), &info) && info.dli_fname) {
        char resolved[PATH_MAX];
        if (::realpath(info.dli_fname, resolved)) return resolved;
        return info.dli_fname;
    }
    return {};
}

}  // namespace ccl_core
