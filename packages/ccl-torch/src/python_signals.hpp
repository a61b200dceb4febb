// Ctrl-C in the backend's waits (interrupts.hpp), for the Python binding.
#pragma once

namespace ccl_torch {

// At import, with Python's lock held: the waits of Python's main thread run its pending signal handlers every 50 ms.
void check_interrupts_on_the_main_thread();

}  // namespace ccl_torch
