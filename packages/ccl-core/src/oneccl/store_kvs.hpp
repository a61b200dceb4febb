// oneCCL's key-value interface served by our Store, so that oneCCL's own rendezvous goes through the
// user's store: no extra listening socket on rank 0, and no teardown that depends on rank 0 being alive.
#pragma once

#include <ccl_core/store.hpp>

#include <ccl_core/oneccl/convert.hpp>

#include <memory>

namespace ccl_core::detail {

class StoreKvs final : public ccl::kvs_interface {
public:
    StoreKvs(std::shared_ptr<Store> store, int id);

    // Answers at once, empty when the key is absent: oneCCL reads some keys that may not exist yet
    // (taking "absent" as a value) and retries the others itself, up to CCL_KVS_GET_TIMEOUT.
    ccl::vector_class<char> get(const ccl::string_class& key) override;
    // Never throws: oneCCL also calls this from destructors (removing its keys), where the store may
    // already be gone and an exception would terminate the process.
    void set(const ccl::string_class& key, const ccl::vector_class<char>& data) override;
    int get_id() override { return id_; }

private:
    std::shared_ptr<Store> store_;
    int id_;
};

}  // namespace ccl_core::detail
