// Ctrl-C while a torch caller waits on the ccl backend. torch releases Python's lock around Work.wait, and Python runs
// signal handlers only on its main thread and only when asked: a wait that never asks keeps a Ctrl-C waiting for as
// long as the group's timeout (minutes). So every blocking wait of the backend runs a check every 50 ms, which the
// Python binding installs at import (python_signals.cpp; the backend itself never touches Python). What the check
// throws (KeyboardInterrupt, or whatever the user's SIGINT handler raised) ends the wait, and ccl-core aborts the group
// the op belongs to.
#pragma once

namespace ccl_torch {

using InterruptCheck = void (*)();

// Installed once, by the binding at import; before that, and in C++-only use, waits check nothing.
void install_interrupt_check(InterruptCheck check);

// Runs the installed check; when it throws, sets `fired` first, so the waiter can tell an interrupt from the outcome
// of the operation (an interrupt is not the op's error: it is not recorded on the work).
void check_for_interrupt(bool& fired);

}  // namespace ccl_torch
