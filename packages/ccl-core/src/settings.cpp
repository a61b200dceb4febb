#include "settings.hpp"

#include <ccl_core/errors.hpp>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace ccl_core::detail {

const std::vector<Setting>& settings() {
    static const std::vector<Setting> table = {
        {"CCL_CORE_SHM", "switch", "1",
         "allreduce, allgather, reduce_scatter and broadcast through ccl-core's shared-memory path when every rank of "
         "the group is on this host (by hostname and boot id); 0: oneCCL for every op. One rank with 0 makes the whole "
         "group use oneCCL"},
        {"CCL_CORE_SHM_SEGMENT_BYTES", "bytes", "the CPU's per-core L2 cache, within 256 KiB-4 MiB (1 MiB when unknown)",
         "per-rank slot of the shared-memory path: large messages move in pieces of this size (rank 0's applies)"},
        {"CCL_CORE_SHM_SMALL_BYTES", "bytes", "65536 at 2 ranks, 32768 at 3-4, 2048 from 5 on; bfloat16: 16384 at 2 "
         "ranks, 1024 from 3 on",
         "allreduces up to this size take the one-synchronisation variant (every rank reduces every rank's input); "
         "larger ones reduce a share each, then gather the shares (rank 0's applies)"},
        {"CCL_CORE_THREADS", "count", "the rank's share of cores: its affinity, the host's cores over its ranks, "
         "the threads it computes with (torch's, under ccl-torch; else OMP_NUM_THREADS), the smallest",
         "threads per rank, the caller included, that the shared-memory path spreads large copies and reductions "
         "over (each element by one thread: the same bits); 1: the caller alone"},
        {"CCL_CORE_KERNEL", "avx512, avx2 or baseline", "the best level the CPU has",
         "instruction-set level of the reduction kernels; every level gives the same bits. An unknown or unsupported "
         "level fails communicator creation with an error that lists the valid ones"},
        {"CCL_CORE_PROGRESS", "thread or caller", "thread",
         "thread: a background thread moves async operations while the caller computes; caller: they move only inside "
         "wait()/test()/is_completed() (for users who pin every core)"},
        {"CCL_CORE_HIERARCHY", "switch", "1",
         "groups that span hosts go inside each host first, then across hosts: every op when the hosts hold the same "
         "number (>= 2) of ranks, allreduce through a leader per host when they hold different numbers; 0 on any "
         "rank: oneCCL's flat algorithms"},
        {"CCL_CORE_HIERARCHY_MIN_BYTES", "bytes", "262144",
         "the hierarchical path takes ops from this size per rank up (rank 0's applies)"},
        {"CCL_CORE_HIERARCHY_PIECE_BYTES", "bytes", "4194304",
         "hierarchical ops move in pieces of about this size, so one crosses the link while the next is reduced inside "
         "the host (rank 0's applies)"},
    };
    return table;
}

namespace {

const Setting& declared(const char* name) {
    for (const Setting& s : settings()) {
        if (std::strcmp(s.name, name) == 0) return s;
    }
    throw std::logic_error(std::string("ccl-core reads an undeclared setting: ") + name);
}

}  // namespace

std::string setting_text(const char* name) {
    (void)declared(name);
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

bool setting_on(const char* name) {
    std::string v = setting_text(name);
    if (v.empty()) v = declared(name).default_value;
    if (v != "0" && v != "1") throw InvalidArgument(std::string(name) + "=" + v + ": use 1 or 0");
    return v == "1";
}

std::size_t parse_bytes(const std::string& what, const std::string& v) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end || v[0] == '-' || v[0] == '+' || v[0] == ' ') {
        throw InvalidArgument(what + "=" + v + " is not a number of bytes");
    }
    return static_cast<std::size_t>(n);
}

std::size_t setting_bytes(const char* name, std::size_t fallback) {
    const std::string v = setting_text(name);
    return v.empty() ? fallback : parse_bytes(name, v);
}

void check_settings() {
    for (const Setting& s : settings()) {
        if (std::strcmp(s.kind, "switch") == 0) (void)setting_on(s.name);
        if (std::strcmp(s.kind, "bytes") == 0 || std::strcmp(s.kind, "count") == 0) (void)setting_bytes(s.name, 0);
    }
}

}  // namespace ccl_core::detail
