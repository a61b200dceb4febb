// ccl-core's oneCCL engine: one oneCCL communicator over a group (group.hpp), and the issuing of oneCCL operations on it
// under the one engine lock, whether their buffers live in host memory (ccl_core::Communicator) or on a device
// (ccl-xpu's DeviceCommunicator). Waiting, timeouts, abort and Ctrl-C are the group's (its operations'), the checks
// of every collective's arguments are validate.hpp's.
// Where memory lives is the caller's choice of ConnectOneCcl (and of the stream its issue callbacks pass to oneCCL),
// so this header never names SYCL and ccl-core builds without it.
#pragma once

#include <ccl_core/group.hpp>
#include <ccl_core/request.hpp>

#include <ccl_core/oneccl/convert.hpp>

#include <functional>
#include <memory>
#include <string>

namespace ccl_core {

// Makes oneCCL's communicator once the ranks have met: host memory by default; a device plugin passes one that
// names its device and context (ccl::create_communicator(size, rank, device, context, kvs)).
using ConnectOneCcl =
    std::function<ccl::communicator(int size, int rank, const std::shared_ptr<ccl::kvs_interface>& kvs)>;

// Starts one oneCCL operation on the engine's communicator and returns its event.
using StartOneCcl = std::function<ccl::event(ccl::communicator&)>;

struct EngineSettings {
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
    // Creates oneCCL's communicator over the group's ranks (collective; oneCCL meets through the group's store).
    // BackendError when oneCCL refuses.
    static std::shared_ptr<Engine> create(std::shared_ptr<Group> group, EngineSettings settings = {});
    // oneCCL's destructors wait for unfinished operations, which never finish once a peer is gone: the engine of an
    // aborted group leaves its communicator to the process's end instead of destroying it.
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    const std::shared_ptr<Group>& group() const { return group_; }
    const EngineSettings& settings() const { return settings_; }

    // Issues a oneCCL operation under the engine lock: `start` gets oneCCL's communicator and returns the event.
    // `peers` names who must take part ("ranks 0-3", "rank 1") in a timeout's message; `finish` runs once when it
    // completes (avg's division, ...). With settings().calls_block, `start` runs later on another thread, so it
    // must own what it uses (capture by value).
    Request issue(const char* op, std::string peers, StartOneCcl start, std::function<void()> finish = {});

    // With settings().calls_block: waits until the blocking-call thread has let go of every call issued here
    // (bounded, and not at all once the group is aborted). An owner calls it before dropping its last reference,
    // so that the engine's destruction, which is collective and enters oneCCL, runs on the owner's thread and not
    // on that thread, concurrently with the owner's next oneCCL call (two ranks then hung creating their next
    // communicator).
    void settle_blocking_calls() noexcept;

private:
    friend class OneCclOperation;
    Engine(std::shared_ptr<Group> group, EngineSettings settings);
    // oneCCL's destructor ends with a barrier over the store, whose last reads may come after a fast rank has
    // left it. Under srun or mpiexec rank 0's process hosts the store: were it to exit then, the others would
    // retry their reads for ever. So every rank records that it is through, and rank 0 waits for all of them
    // (bounded: a rank that died must not hold it).
    void wait_for_departures() noexcept;

    std::shared_ptr<Group> group_;
    EngineSettings settings_;
    std::shared_ptr<ccl::kvs_interface> kvs_;
    std::unique_ptr<ccl::communicator> comm_;
    struct CallsHeld;  // issue.cpp: how many of this engine's calls the blocking-call thread still holds
    std::shared_ptr<CallsHeld> calls_held_;
};

}  // namespace ccl_core
