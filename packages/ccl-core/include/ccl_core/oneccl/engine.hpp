// ccl-core's oneCCL engine: one oneCCL communicator and everything every operation on it shares, whether its
// buffers live in host memory (ccl_core::Communicator) or on a device (ccl-xpu's DeviceCommunicator):
// - the rendezvous over the store, with the join that names ranks that never arrived;
// - issuing under the one engine lock;
// - operations with test, wait, timeout, abort and Ctrl-C (through wait's callback);
// - the argument checks every collective makes.
// Where memory lives is the caller's choice of ConnectOneCcl (and of the stream its issue callbacks pass to oneCCL),
// so this header never names SYCL and ccl-core builds without it.
#pragma once

#include <ccl_core/communicator_options.hpp>
#include <ccl_core/errors.hpp>
#include <ccl_core/request.hpp>
#include <ccl_core/store.hpp>

#include <ccl_core/oneccl/convert.hpp>

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

class LocalPath;  // shm/local_path.hpp (private to ccl-core)

// Makes oneCCL's communicator once the ranks have met: host memory by default; a device plugin passes one that
// names its device and context (ccl::create_communicator(size, rank, device, context, kvs)).
using ConnectOneCcl =
    std::function<ccl::communicator(int size, int rank, const std::shared_ptr<ccl::kvs_interface>& kvs)>;

// Starts one oneCCL operation on the engine's communicator and returns its event.
using StartOneCcl = std::function<ccl::event(ccl::communicator&)>;

// Before an engine aborts on a failure: what caused it and the reason in words.
using AbortListener = std::function<void(AbortCause, const std::string&)>;

struct EngineSettings {
    std::string kind = "communicator";  // in messages: "device communicator 'default' (rank 0 of 2)"
    std::string key_prefix = "ccl_core";  // its keys in the store, so a host and a device engine can share one
    ConnectOneCcl connect;  // empty: host memory
    // false: wait() returns once the op is issued, because the device queue it was ordered on runs it before any
    // later work there (CCL_BLOCKING_WAIT=0 in the original bindings). test() still reports completion.
    bool wait_for_completion = true;
    // true: oneCCL runs each op to completion inside the call that issues it (its SYCL build does so for every op
    // over OFI). Calls then go to one thread of the process, in order, and the op completes when its call returns,
    // so a wait keeps its timeout, Ctrl-C and abort. A call whose peer never comes stays stuck in that thread,
    // holding the engine lock: after such a timeout no communicator of the process can issue oneCCL ops any more.
    bool calls_block = false;
};

class Engine final : public std::enable_shared_from_this<Engine> {
public:
    // Meets the other ranks through `store` and creates oneCCL's communicator. Throws Timeout naming the ranks that
    // never arrived, BackendError when oneCCL refuses.
    static std::shared_ptr<Engine> create(std::shared_ptr<Store> store, int rank, int size,
                                          const CommunicatorOptions& options, EngineSettings settings = {});
    // oneCCL's destructors wait for unfinished operations, which never finish once a peer is gone: an aborted
    // engine leaves its communicator to the process's end instead of destroying it.
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    int rank() const { return rank_; }
    int size() const { return size_; }
    const CommunicatorOptions& options() const { return options_; }
    const EngineSettings& settings() const { return settings_; }
    const std::shared_ptr<Store>& store() const { return store_; }
    // Ranks of this group on this host (by hostname and boot id), and whether they outnumber the cores they may
    // run on together (then waiting sleeps between polls).
    int local_ranks() const { return local_ranks_; }
    // The host of every rank, hosts numbered in the order of their lowest rank (so the same on every rank).
    const std::vector<int>& host_of_ranks() const { return host_of_ranks_; }
    bool oversubscribed() const { return oversubscribed_; }
    // "communicator 'tp' (rank 1 of 4)"
    std::string describe() const;
    // "ranks 0-3"
    std::string all_ranks() const;

    bool aborted() const { return aborted_.load(); }
    // Marks the engine aborted (the first reason and cause are kept) and removes /dev/shm files of dead same-host
    // peers. For a failure (any cause but by_user), the abort listener runs first, once.
    void abort(const std::string& reason, AbortCause cause = AbortCause::by_user);
    AbortCause abort_cause() const;
    std::string abort_reason() const;
    // Runs before the engine aborts on a failure (torch's abort hooks: capture state while it is still there). Set
    // once by the layer that owns the engine; it must not call back into the engine.
    void on_abort(AbortListener listener);
    // Says where the other ranks are when `op` timed out or the ranks disagreed on it: appended to that error's
    // message. Set once by the layer that knows (ccl-torch's status board); it must return within a second or so.
    void explain_failures_with(std::function<std::string(const std::string& op)> explainer);
    std::string explain_failure(const std::string& op) const;
    void throw_if_aborted(const char* op) const;
    // The first same-host peer whose process is gone, as "rank R (pid P)", or "" while all live.
    std::string dead_local_peer() const;

    // The same-host path whose queue every wait also drives (set once, by the layer that made it).
    void lend_local_path(std::shared_ptr<LocalPath> path) { local_path_ = std::move(path); }
    LocalPath* local_path() const { return local_path_.get(); }

    // Issues a oneCCL operation under the engine lock: `start` gets oneCCL's communicator and returns the event.
    // `peers` names who must take part ("ranks 0-3", "rank 1") in a timeout's message; `finish` runs once when it
    // completes (avg's division, ...). With settings().calls_block, `start` runs later on another thread, so it
    // must own what it uses (capture by value).
    Request issue(const char* op, std::string peers, StartOneCcl start, std::function<void()> finish = {});

    // Argument checks, each naming the operation and the bad value (InvalidArgument).
    void check_rank(const char* op, const char* what, int r) const;
    void check_counts(const char* op, const char* name, const std::vector<std::size_t>& counts) const;
    static void check_buffer(const char* op, const char* name, const void* p, std::size_t count);

    // Threads inside a wait() on one of this engine's ops, by what that wait drives: a wait on a oneCCL op drives
    // oneCCL and the same-host path, a wait on a same-host op only that path. The progress thread stays out of what
    // a caller drives (two pollers only compete for the cores) and moves the rest.
    std::atomic<int> oneccl_waiters{0};
    std::atomic<int> local_path_waiters{0};

private:
    friend class OneCclOperation;
    Engine(std::shared_ptr<Store> store, int rank, int size, CommunicatorOptions options, EngineSettings settings);
    void join(std::chrono::steady_clock::time_point deadline);
    // oneCCL's destructor ends with a barrier over the store, whose last reads may come after a fast rank has
    // left it. Under srun or mpiexec rank 0's process hosts the store: were it to exit then, the others would
    // retry their reads for ever. So every rank records that it is through, and rank 0 waits for all of them
    // (bounded: a rank that died must not hold it).
    void wait_for_departures() noexcept;

    std::shared_ptr<Store> store_;
    int rank_;
    int size_;
    CommunicatorOptions options_;
    EngineSettings settings_;
    std::shared_ptr<ccl::kvs_interface> kvs_;
    std::unique_ptr<ccl::communicator> comm_;
    std::shared_ptr<LocalPath> local_path_;
    int local_ranks_ = 1;
    std::vector<int> host_of_ranks_;
    bool oversubscribed_ = false;
    std::vector<std::pair<int, pid_t>> local_peer_pids_;  // (rank, process) of same-host peers (dead_processes.hpp)
    std::atomic<bool> aborted_{false};
    mutable std::mutex abort_mutex_;
    bool aborting_ = false;  // the first abort runs the listener before aborted_ is set
    std::string abort_reason_;
    AbortCause abort_cause_ = AbortCause::none;
    AbortListener abort_listener_;
    std::function<std::string(const std::string&)> explainer_;
};

}  // namespace ccl_core
