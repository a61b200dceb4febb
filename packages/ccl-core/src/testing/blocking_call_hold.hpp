// A wide window on purpose, for the tests of Engine::settle_blocking_calls (ccl_core._hold_blocking_calls): the
// blocking-call thread keeps each call, and what it holds, that long after the call has reported its end. Without the
// settling, an engine dropped by its owner then dies on that thread, beside the owner's next oneCCL call.
// Unset, the cost is one relaxed load per blocking call.
#pragma once

#include <chrono>

namespace ccl_core::detail {

void hold_blocking_calls(std::chrono::milliseconds hold);
std::chrono::milliseconds blocking_call_hold();

}  // namespace ccl_core::detail
