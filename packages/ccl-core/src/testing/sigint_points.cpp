#include "sigint_points.hpp"

#include <atomic>
#include <csignal>

#include <signal.h>
#include <unistd.h>

namespace ccl_core::detail {
namespace {

constexpr int kUnarmed = -1;
std::atomic<int> armed{kUnarmed};  // a SigintPoint, until it fired

}  // namespace

void arm_sigint(SigintPoint at) { armed.store(static_cast<int>(at)); }

void sigint_point(SigintPoint here) {
    int expected = static_cast<int>(here);
    if (armed.load(std::memory_order_relaxed) != expected || !armed.compare_exchange_strong(expected, kUnarmed)) return;
    if (here == SigintPoint::issue) {
        std::raise(SIGINT);
    } else {
        ::kill(::getpid(), SIGINT);
    }
}

}  // namespace ccl_core::detail
