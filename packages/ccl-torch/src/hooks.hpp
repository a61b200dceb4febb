// torch's abort and completion hooks (Backend::registerAbortHook from torch 2.14, registerCompletionHook from 2.15):
// the tables a group keeps and their firing. torch's flight recorder registers one of each on every group: the
// completion hook retires an op's entry when the op really finished (so a dump tells a finished collective from a
// hung one), the abort hook writes the dump before the group aborts on a timeout or error.
//
// Hooks run on whichever thread learns the news (the caller's wait, ccl-core's progress thread), never under the
// table's lock: the recorder takes its own lock and then unregisters, so calling a hook under ours could deadlock.
// Firing reads an immutable snapshot of the table (copy on write), so an op pays one atomic load when nobody listens.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

namespace ccl_torch {

// What a successfully completed op tells the completion hooks.
struct Completion {
    uint64_t key;                       // the work's getCompletionKey()
    std::optional<float> duration_ms;   // issue to completion, when the group times its ops (enableCollectivesTiming)
};

class HookTables {
public:
    using AbortHook = std::function<void()>;
    using CompletionHook = std::function<void(const Completion&)>;

    void add_abort_hook(int64_t id, AbortHook hook);
    void remove_abort_hook(int64_t id);
    void add_completion_hook(int64_t id, CompletionHook hook);
    void remove_completion_hook(int64_t id);

    // Each runs every hook of its table once; a hook's exception is swallowed (it must not stop an abort, nor fail
    // an op that succeeded).
    void run_abort_hooks() const;
    void run_completion_hooks(const Completion& done) const;
    bool any_completion_hook() const { return std::atomic_load(&completion_) != nullptr; }

    // A key no work of this process had before (works may be completed after they are gone: keys are never reused).
    static uint64_t next_completion_key();

private:
    template <class Hook>
    using Table = std::shared_ptr<const std::map<int64_t, Hook>>;

    std::mutex mutex_;  // serialises writers; readers take a snapshot
    Table<AbortHook> abort_;
    Table<CompletionHook> completion_;
};

}  // namespace ccl_torch
