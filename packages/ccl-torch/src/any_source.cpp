#include "any_source.hpp"

#include <cstdio>

namespace ccl_torch {

AnySourceLedger::AnySourceLedger(c10::intrusive_ptr<c10d::Store> store, int rank, int size)
    : store_(std::move(store)), rank_(rank), claimed_(static_cast<std::size_t>(size), 0) {}

AnySourceLedger::~AnySourceLedger() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::string AnySourceLedger::key(int dst, int src) const {
    return "ccl_torch/sent/" + std::to_string(dst) + "/" + std::to_string(src);
}

void AnySourceLedger::sent_to(int dst) {
    bool wake;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        ++pending_[dst];
        if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
        wake = idle_;  // a thread between deliveries picks the count up by itself: no syscall per send
    }
    if (wake) cv_.notify_one();
}

void AnySourceLedger::received_from(int src) {
    std::lock_guard<std::mutex> lock(claim_mutex_);
    ++claimed_.at(static_cast<std::size_t>(src));
}

std::optional<int> AnySourceLedger::claim_any() {
    std::lock_guard<std::mutex> lock(claim_mutex_);
    for (int src = 0; src < static_cast<int>(claimed_.size()); ++src) {
        if (src == rank_) continue;
        // add(key, 0) reads a counter that may not exist yet without blocking (get would wait for it)
        if (store_->add(key(rank_, src), 0) > claimed_[src]) {
            ++claimed_[src];
            return src;
        }
    }
    return std::nullopt;
}

void AnySourceLedger::deliver(const std::map<int, int64_t>& counts) {
    for (const auto& [dst, n] : counts) {
        try {
            store_->add(key(dst, rank_), n);
        } catch (const std::exception& e) {
            // the store is gone (group torn down); a receiver waiting on this count times out and says so
            std::fprintf(stderr, "[oneccl_bindings_for_pytorch] rank %d could not announce %lld send(s) to rank %d "
                         "for recv without src: %s\n", rank_, static_cast<long long>(n), dst, e.what());
        }
    }
}

// Delivers at once after a quiet spell, then at most every kDeliveryInterval while sends keep coming: a store round
// trip per send would cost a tight send loop (and the store's host) more than the sends themselves.
void AnySourceLedger::run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        idle_ = true;
        cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        idle_ = false;
        while (!pending_.empty()) {
            std::map<int, int64_t> counts;
            counts.swap(pending_);
            lock.unlock();
            deliver(counts);
            lock.lock();
            if (!stop_) cv_.wait_for(lock, kDeliveryInterval, [&] { return stop_; });
        }
        if (stop_) return;
    }
}

}  // namespace ccl_torch
