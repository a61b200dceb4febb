#include "store_kvs.hpp"

#include <ccl_core/backoff.hpp>
#include <ccl_core/errors.hpp>

#include <chrono>

namespace ccl_core::detail {

namespace {
// oneCCL retries in a tight loop; each miss waits this long, so that it does not flood a TCP store
const BackoffPhases kPace = BackoffPhases::naps(std::chrono::milliseconds(1), std::chrono::milliseconds(1));
}  // namespace

StoreKvs::StoreKvs(std::shared_ptr<Store> store, int id) : store_(std::move(store)), id_(id) {}

ccl::vector_class<char> StoreKvs::get(const ccl::string_class& key) {
    std::optional<Bytes> value;
    try {
        value = store_->try_get(key);
    } catch (const std::exception&) {
        // store unreachable: answer "absent" and let oneCCL's own retry and timeout decide
    }
    if (!value) {
        Backoff(kPace).pause(std::chrono::steady_clock::now());
        return {};
    }
    return ccl::vector_class<char>(value->begin(), value->end());
}

void StoreKvs::set(const ccl::string_class& key, const ccl::vector_class<char>& data) {
    try {
        store_->set(key, Bytes(data.begin(), data.end()));
    } catch (const std::exception&) {
        // see the header: a lost write only matters during bootstrap, where get() then times out
    }
}

}  // namespace ccl_core::detail
