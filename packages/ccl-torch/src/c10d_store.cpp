#include "c10d_store.hpp"

#include <ccl_core/errors.hpp>

namespace ccl_torch {

void C10dStore::set(const std::string& key, const ccl_core::Bytes& value) { store_->set(key, value); }

ccl_core::Bytes C10dStore::get(const std::string& key, ccl_core::Milliseconds timeout) {
    // c10d's wait takes a zero timeout for "no timeout": wait forever. Ours means "only if it is there now".
    if (timeout.count() <= 0) {
        if (auto value = try_get(key)) return *value;
        throw ccl_core::Timeout("key '" + key + "' is not in the store");
    }
    try {
        store_->wait({key}, timeout);
    } catch (const c10::Error& e) {  // DistStoreError on timeout
        throw ccl_core::Timeout("key '" + key + "' did not appear in the store within " +
                                std::to_string(timeout.count()) + " ms (" + e.what_without_backtrace() + ")");
    }
    return store_->get(key);
}

std::optional<ccl_core::Bytes> C10dStore::try_get(const std::string& key) {
    if (!store_->check({key})) return std::nullopt;
    return store_->get(key);
}

}  // namespace ccl_torch
