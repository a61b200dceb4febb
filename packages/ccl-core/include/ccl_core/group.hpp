// A group of ranks as every path of ccl-core shares it: who the ranks are and where they run (the host of each rank,
// whether a host's ranks outnumber its cores), the store they met through and their timeout, and the group's fate:
// abort with its cause and listener, dead same-host peers, and the threads waiting on its ops. The ways an op may go
// (the shared-memory path, the hierarchy across hosts, the oneCCL engine) each work on a group; none of them is one.
// Host communicators (communicator.hpp) and ccl-xpu's device communicators are each a group plus their paths.
#pragma once

#include <ccl_core/communicator_options.hpp>
#include <ccl_core/errors.hpp>
#include <ccl_core/store.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace ccl_core {

class LocalPath;  // group/local_path.hpp (private to ccl-core)

// Before a group aborts on a failure: what caused it and the reason in words.
using AbortListener = std::function<void(AbortCause, const std::string&)>;

struct GroupSettings {
    std::string kind = "communicator";  // in messages: "device communicator 'default' (rank 0 of 2)"
    std::string key_prefix = "ccl_core";  // its keys in the store, so a host and a device group can share one
};

class Group final {
public:
    // Meets the other ranks through `store`: each says on which host (hostname and boot id) and cores its process runs,
    // and with which oneCCL transports. Throws InvalidArgument for a bad rank, size or timeout, or ranks that disagree
    // on oneCCL's shared-memory transport; Timeout naming the ranks that never arrived.
    static std::shared_ptr<Group> join(std::shared_ptr<Store> store, int rank, int size,
                                       const CommunicatorOptions& options, GroupSettings settings = {});
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;

    int rank() const { return rank_; }
    int size() const { return size_; }
    const CommunicatorOptions& options() const { return options_; }
    const GroupSettings& settings() const { return settings_; }
    const std::shared_ptr<Store>& store() const { return store_; }
    // Ranks of this group on this host, and whether they outnumber the cores they may run on together (the union of
    // their affinities; waiting then sleeps between polls).
    int local_ranks() const { return local_ranks_; }
    bool oversubscribed() const { return oversubscribed_; }
    // The cores this host's ranks may run on together (the union of their affinities; 0 when unknown).
    int host_cpus() const { return host_cpus_; }
    // The host of every rank, hosts numbered in the order of their lowest rank (so the same on every rank).
    const std::vector<int>& host_of_ranks() const { return host_of_ranks_; }
    // "communicator 'tp' (rank 1 of 4)"
    std::string describe() const;
    // "ranks 0-3"
    std::string all_ranks() const;

    bool aborted() const { return aborted_.load(std::memory_order_relaxed); }
    // Marks the group aborted (the first reason and cause are kept) and removes /dev/shm files of dead same-host
    // peers. For a failure (any cause but by_user), the abort listener runs first, once.
    void abort(const std::string& reason, AbortCause cause = AbortCause::by_user);
    AbortCause abort_cause() const;
    std::string abort_reason() const;
    // CommunicatorAborted naming `op`, once the group is aborted.
    void throw_if_aborted(const char* op) const;
    // Runs before the group aborts on a failure (torch's abort hooks: capture state while it is still there). Set
    // once by the layer that owns the group; it must not call back into the group.
    void on_abort(AbortListener listener);
    // Says where the other ranks are when `op` timed out or the ranks disagreed on it: appended to that error's
    // message. Set once by the layer that knows (ccl-torch's status board); it must return within a second or so.
    void explain_failures_with(std::function<std::string(const std::string& op)> explainer);
    std::string explain_failure(const std::string& op) const;
    // The first same-host peer whose process is gone, as "rank R (pid P)", or "" while all live.
    std::string dead_local_peer() const;

    // The same-host path whose queue every wait on the group also drives (set by the layer that made it).
    void lend_local_path(std::shared_ptr<LocalPath> path);
    LocalPath* local_path() const { return local_path_.get(); }

    // A thread inside a wait on one of the group's ops, for as long as it lives. A wait on a oneCCL op drives oneCCL
    // and the same-host path, a wait on a same-host op only that path; the progress thread stays out of what a caller
    // drives (two pollers only compete for the cores) and moves the rest.
    class Waiting {
    public:
        Waiting(Group& group, bool through_oneccl);
        ~Waiting();
        Waiting(const Waiting&) = delete;
        Waiting& operator=(const Waiting&) = delete;

    private:
        std::atomic<int>& count_;
    };
    // Whether a caller's wait drives what an op `through_oneccl` (or not) would move.
    bool driven_by_a_caller(bool through_oneccl) const;

private:
    Group(std::shared_ptr<Store> store, int rank, int size, CommunicatorOptions options, GroupSettings settings);
    void meet(std::chrono::steady_clock::time_point deadline);

    std::shared_ptr<Store> store_;
    int rank_;
    int size_;
    CommunicatorOptions options_;
    GroupSettings settings_;
    int local_ranks_ = 1;
    int host_cpus_ = 0;
    bool oversubscribed_ = false;
    std::vector<int> host_of_ranks_;
    std::vector<std::pair<int, pid_t>> local_peer_pids_;  // (rank, process) of same-host peers (dead_processes.hpp)
    std::shared_ptr<LocalPath> local_path_;
    std::atomic<int> oneccl_waiters_{0};
    std::atomic<int> local_path_waiters_{0};
    std::atomic<bool> aborted_{false};
    mutable std::mutex abort_mutex_;
    bool aborting_ = false;  // the first abort runs the listener before aborted_ is set
    std::string abort_reason_;
    AbortCause abort_cause_ = AbortCause::none;
    AbortListener abort_listener_;
    std::function<std::string(const std::string&)> explainer_;
};

}  // namespace ccl_core
