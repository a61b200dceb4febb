#include "c10d_store.hpp"

#include <ccl_core/errors.hpp>

namespace ccl_torch {

void C10dStore::set(const std::string& key, const ccl_core::Bytes& value) { store_->set(key, value); }

ccl_core::Bytes C10dStore::get(const std::string& key, ccl_core::Milliseconds timeout) {
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
