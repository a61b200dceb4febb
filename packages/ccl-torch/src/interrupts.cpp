#include "interrupts.hpp"

#include <atomic>

namespace ccl_torch {
namespace {

std::atomic<InterruptCheck> installed{nullptr};

}  // namespace

void install_interrupt_check(InterruptCheck check) { installed.store(check); }

void check_for_interrupt(bool& fired) {
    const InterruptCheck check = installed.load(std::memory_order_relaxed);
    if (!check) return;
    try {
        check();
    } catch (...) {
        fired = true;
        throw;
    }
}

}  // namespace ccl_torch
