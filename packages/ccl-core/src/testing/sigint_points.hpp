// Ctrl-C on purpose, for the interrupt tests (ccl_core._raise_sigint_at): the next operation that reaches the armed
// phase raises SIGINT in this process, once. A timer cannot aim at a phase; this can, so those tests are deterministic.
// - issue: while the operation is being issued, before the collective's call returns. On the Python faces of
//   ccl-core and ccl-xpu the caller holds the GIL then, so Python cannot run its handler yet: the state a Ctrl-C that
//   came just before the call, or during it, leaves behind. Raised on the issuing thread.
// - wait: as a wait on the operation begins, the GIL released. Sent to the process, as a terminal's Ctrl-C is.
// Unarmed, the cost is one relaxed load per operation.
#pragma once

namespace ccl_core::detail {

enum class SigintPoint { issue, wait };

void arm_sigint(SigintPoint at);
void sigint_point(SigintPoint here);

}  // namespace ccl_core::detail
