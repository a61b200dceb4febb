// torch's c10d::Store (the one init_process_group hands every group, already prefixed) as a ccl-core Store.
#pragma once

#include <ccl_core/store.hpp>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ccl_torch {

class C10dStore final : public ccl_core::Store {
public:
    explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
    void set(const std::string& key, const ccl_core::Bytes& value) override;
    ccl_core::Bytes get(const std::string& key, ccl_core::Milliseconds timeout) override;
    std::optional<ccl_core::Bytes> try_get(const std::string& key) override;

private:
    c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace ccl_torch
