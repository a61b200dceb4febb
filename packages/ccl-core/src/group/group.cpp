// A group (group.hpp): the ranks meet, learn where each runs, and share the group's fate (abort, dead peers).
#include <ccl_core/group.hpp>

#include "dead_processes.hpp"
#include "local_path.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <sched.h>
#include <unistd.h>

namespace ccl_core {

namespace {

// Who shares a host: the hostname plus the kernel's boot id (containers may share a hostname), never
// launcher variables such as LOCAL_WORLD_SIZE, which are wrong for sub-groups.
std::string host_identity() {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    std::string boot;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
    return std::string(name) + "/" + boot;
}

// The pid namespace this process lives in ("pid:[4026531836]"), "" when unknown.
std::string pid_namespace() {
    char link[64] = {};
    const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
    return n > 0 ? std::string(link, static_cast<std::size_t>(n)) : std::string();
}

// The cpus this process may run on, as "0,1,5". Launchers that pin ranks (Intel MPI) give each rank its own:
// whether ranks outnumber cores is decided on the union over the ranks of a host.
std::string affinity_list() {
    cpu_set_t set;
    std::string out;
    if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &set)) out += (out.empty() ? "" : ",") + std::to_string(cpu);
    }
    return out;
}

// A pid handed over by the store is used only if it is a plain number from our own pid namespace.
bool pid_means_something(const std::string& pid, const std::string& its_namespace, const std::string& ours) {
    return !its_namespace.empty() && its_namespace == ours && !pid.empty() && pid.size() < 10 &&
           pid.find_first_not_of("0123456789") == std::string::npos;
}

// "0, 1, 4"
std::string rank_list(const std::vector<int>& ranks) {
    std::string list;
    for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
    return list;
}

}  // namespace

Group::Group(std::shared_ptr<Store> store, int rank, int size, CommunicatorOptions options, GroupSettings settings)
    : store_(std::move(store)), rank_(rank), size_(size), options_(std::move(options)), settings_(std::move(settings)) {}

std::shared_ptr<Group> Group::join(std::shared_ptr<Store> store, int rank, int size, const CommunicatorOptions& options,
                                   GroupSettings settings) {
    const std::string where = "creating a " + settings.kind;  // "creating a device communicator: ..."
    if (!store) throw InvalidArgument(where + ": store is null");
    if (size < 1) throw InvalidArgument(where + ": size must be >= 1, got " + std::to_string(size));
    if (rank < 0 || rank >= size) {
        throw InvalidArgument(where + ": rank " + std::to_string(rank) + " is out of range for size " +
                              std::to_string(size) + " (0.." + std::to_string(size - 1) + ")");
    }
    if (options.timeout.count() <= 0) throw InvalidArgument(where + ": timeout must be positive");
    std::shared_ptr<Group> group(new Group(std::move(store), rank, size, options, std::move(settings)));
    group->meet(std::chrono::steady_clock::now() + options.timeout);
    return group;
}

// oneCCL's rendezvous (through our store, see StoreKvs) has no useful timeout of its own: the group first makes sure
// that every rank has arrived, so that a missing one is named in a clear error. Each rank announces
// "<host identity>\n<pid>\n<cpus>\n<pid namespace>\n<CCL_ATL_SHM>": the host identities tell how many ranks share a
// host, the pids of same-host peers let survivors clean up after a peer that was killed (dead_processes.hpp) and notice
// its death while waiting (only within our pid namespace: a pid from another container means nothing here), their
// cpus tell whether the host's ranks outnumber cores, and CCL_ATL_SHM must be the same everywhere: oneCCL's ranks
// exchange one address per transport, and a rank without the shm transport (a small /dev/shm turns it off, see
// runtime.cpp) cannot read the others' and ends its process inside oneCCL.
void Group::meet(std::chrono::steady_clock::time_point deadline) {
    auto remaining = [&] {
        return std::max(Milliseconds(0), std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now()));
    };
    const auto key = [&](int r) { return settings_.key_prefix + "/joined/" + std::to_string(r); };
    const std::string me = host_identity();
    const std::string my_pid_namespace = pid_namespace();
    const char* atl_shm = std::getenv("CCL_ATL_SHM");  // set by initialize_runtime when the user did not
    const std::string announcement = me + "\n" + std::to_string(::getpid()) + "\n" + affinity_list() + "\n" +
                                     my_pid_namespace + "\n" + (atl_shm ? atl_shm : "");
    std::map<std::string, std::vector<int>> ranks_by_atl_shm;
    store_->set(key(rank_), Bytes(announcement.begin(), announcement.end()));
    std::vector<int> missing;
    std::set<std::string> host_cpus;
    std::vector<std::string> hosts;  // identities in the order of their lowest rank
    host_of_ranks_.assign(static_cast<std::size_t>(size_), -1);
    int same_host = 0;
    for (int r = 0; r < size_; ++r) {
        try {
            Bytes bytes = store_->get(key(r), missing.empty() ? remaining() : Milliseconds(0));
            std::istringstream text(std::string(bytes.begin(), bytes.end()));
            std::string identity, pid, cpus, cpu, pid_ns, their_atl_shm;
            std::getline(text, identity);
            std::getline(text, pid);
            std::getline(text, cpus);
            std::getline(text, pid_ns);
            std::getline(text, their_atl_shm);
            ranks_by_atl_shm[their_atl_shm].push_back(r);
            auto known = std::find(hosts.begin(), hosts.end(), identity);
            host_of_ranks_[static_cast<std::size_t>(r)] = static_cast<int>(known - hosts.begin());
            if (known == hosts.end()) hosts.push_back(identity);
            if (identity != me) continue;
            ++same_host;
            if (r != rank_ && pid_means_something(pid, pid_ns, my_pid_namespace)) {
                local_peer_pids_.push_back({r, std::stoi(pid)});
            }
            std::istringstream list(cpus);
            while (std::getline(list, cpu, ',')) host_cpus.insert(cpu);
        } catch (const Timeout&) {
            missing.push_back(r);
        }
    }
    local_ranks_ = same_host;
    host_cpus_ = static_cast<int>(host_cpus.size());
    oversubscribed_ = !host_cpus.empty() && same_host > host_cpus_;
    if (!missing.empty()) {
        throw Timeout("bootstrap of " + describe() + ": rank(s) " + rank_list(missing) + " did not join within " +
                      std::to_string(options_.timeout.count()) + " ms");
    }
    if (ranks_by_atl_shm.size() > 1) {
        std::string sides;
        for (const auto& [value, ranks] : ranks_by_atl_shm) {
            sides += (sides.empty() ? "" : ", ") + std::string("CCL_ATL_SHM=") + (value.empty() ? "(unset)" : value) +
                     " on rank(s) " + rank_list(ranks);
        }
        throw InvalidArgument("bootstrap of " + describe() + ": oneCCL needs the same CCL_ATL_SHM on every rank, but "
                              "the ranks have " + sides + ". ccl-core turns it off on a host whose /dev/shm is too "
                              "small (it says so there): give /dev/shm room on every host (docker run --shm-size=1g), "
                              "or set CCL_ATL_SHM=0 for every rank");
    }
}

std::string Group::describe() const {
    return settings_.kind + " '" + options_.name + "' (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
}

std::string Group::all_ranks() const { return size_ == 1 ? "rank 0" : "ranks 0-" + std::to_string(size_ - 1); }

void Group::abort(const std::string& reason, AbortCause cause) {
    AbortListener listener;
    {
        std::lock_guard<std::mutex> lock(abort_mutex_);
        if (aborting_) return;
        aborting_ = true;
        if (cause != AbortCause::by_user) listener = abort_listener_;
    }
    if (listener) {
        try {
            listener(cause, reason);
        } catch (...) {
            // a listener's failure must not stop the abort
        }
    }
    std::lock_guard<std::mutex> lock(abort_mutex_);
    abort_reason_ = reason;
    abort_cause_ = cause;
    aborted_.store(true);
    std::vector<pid_t> pids;
    for (const auto& peer : local_peer_pids_) pids.push_back(peer.second);
    detail::remove_shm_of_dead_processes(pids);
}

AbortCause Group::abort_cause() const {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    return abort_cause_;
}

std::string Group::abort_reason() const {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    return abort_reason_;
}

void Group::on_abort(AbortListener listener) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    abort_listener_ = std::move(listener);
}

void Group::explain_failures_with(std::function<std::string(const std::string& op)> explainer) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    explainer_ = std::move(explainer);
}

std::string Group::explain_failure(const std::string& op) const {
    std::function<std::string(const std::string&)> explainer;
    {
        std::lock_guard<std::mutex> lock(abort_mutex_);
        explainer = explainer_;
    }
    if (!explainer) return "";
    try {
        return explainer(op);
    } catch (const std::exception& e) {
        return std::string("\n(where the other ranks are could not be told: ") + e.what() + ")";
    }
}

void Group::throw_if_aborted(const char* op) const {
    if (!aborted_.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lock(abort_mutex_);
    throw CommunicatorAborted(std::string(op) + ": " + describe() + " was aborted and cannot be used any more (" +
                              abort_reason_ + ")");
}

std::string Group::dead_local_peer() const {
    for (const auto& [r, pid] : local_peer_pids_) {
        if (detail::process_is_gone(pid)) return "rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ")";
    }
    return "";
}

void Group::lend_local_path(std::shared_ptr<LocalPath> path) { local_path_ = std::move(path); }

Group::Waiting::Waiting(Group& group, bool through_oneccl)
    : count_(through_oneccl ? group.oneccl_waiters_ : group.local_path_waiters_) {
    ++count_;
}

Group::Waiting::~Waiting() { --count_; }

bool Group::driven_by_a_caller(bool through_oneccl) const {
    const int oneccl = oneccl_waiters_.load(std::memory_order_relaxed);
    if (through_oneccl) return oneccl > 0;
    return oneccl + local_path_waiters_.load(std::memory_order_relaxed) > 0;
}

}  // namespace ccl_core
