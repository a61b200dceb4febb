#include <ccl_core/errors.hpp>
#include <ccl_core/store.hpp>

namespace ccl_core {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
    if (!inner_) throw InvalidArgument("PrefixStore: inner store is null");
}

void PrefixStore::set(const std::string& key, const Bytes& value) { inner_->set(prefix_ + "/" + key, value); }

Bytes PrefixStore::get(const std::string& key, Milliseconds timeout) {
    return inner_->get(prefix_ + "/" + key, timeout);
}

}  // namespace ccl_core
