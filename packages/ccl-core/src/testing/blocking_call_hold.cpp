#include "blocking_call_hold.hpp"

#include <atomic>

namespace ccl_core::detail {
namespace {

std::atomic<long long> hold_ms{0};

}  // namespace

void hold_blocking_calls(std::chrono::milliseconds hold) { hold_ms.store(hold.count()); }

std::chrono::milliseconds blocking_call_hold() {
    return std::chrono::milliseconds(hold_ms.load(std::memory_order_relaxed));
}

}  // namespace ccl_core::detail
