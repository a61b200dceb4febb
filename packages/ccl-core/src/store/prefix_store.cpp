#include <ccl_core/errors.hpp>
#include <ccl_core/store.hpp>

namespace ccl_core {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
    if (!inner_) throw InvalidArgument("PrefixStore: inner store is null");
}

void PrefixStore::set(const std::string& key, const Bytes& value) { inner_->set(prefix_ + "/" + key, value); }

std::optional<Bytes> Store::try_get(const std::string& key) {
    try {
        return get(key, Milliseconds(0));
    } catch (const Timeout&) {
        return std::nullopt;
    }
}

std::optional<Bytes> PrefixStore::try_get(const std::string& key) { return inner_->try_get(prefix_ + "/" + key); }

Bytes PrefixStore::get(const std::string& key, Milliseconds timeout) {
    return inner_->get(prefix_ + "/" + key, timeout);
}

}  // namespace ccl_core
