#include "hooks.hpp"

namespace ccl_torch {
namespace {

// The table with `id` set to `hook` (or removed, when hook is empty); nullptr when nothing is left.
template <class Hook>
std::shared_ptr<const std::map<int64_t, Hook>> with(const std::shared_ptr<const std::map<int64_t, Hook>>& table,
                                                    int64_t id, Hook hook) {
    auto next = table ? std::make_shared<std::map<int64_t, Hook>>(*table) : std::make_shared<std::map<int64_t, Hook>>();
    if (hook) {
        (*next)[id] = std::move(hook);
    } else {
        next->erase(id);
    }
    if (next->empty()) return nullptr;
    return next;
}

}  // namespace

void HookTables::add_abort_hook(int64_t id, AbortHook hook) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::atomic_store(&abort_, with(std::atomic_load(&abort_), id, std::move(hook)));
}

void HookTables::remove_abort_hook(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::atomic_store(&abort_, with(std::atomic_load(&abort_), id, AbortHook{}));
}

void HookTables::add_completion_hook(int64_t id, CompletionHook hook) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::atomic_store(&completion_, with(std::atomic_load(&completion_), id, std::move(hook)));
}

void HookTables::remove_completion_hook(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::atomic_store(&completion_, with(std::atomic_load(&completion_), id, CompletionHook{}));
}

void HookTables::run_abort_hooks() const {
    const auto table = std::atomic_load(&abort_);
    if (!table) return;
    for (const auto& [id, hook] : *table) {
        try {
            hook();
        } catch (...) {
        }
    }
}

void HookTables::run_completion_hooks(const Completion& done) const {
    const auto table = std::atomic_load(&completion_);
    if (!table) return;
    for (const auto& [id, hook] : *table) {
        try {
            hook(done);
        } catch (...) {
        }
    }
}

uint64_t HookTables::next_completion_key() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace ccl_torch
