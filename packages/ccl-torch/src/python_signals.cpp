// The interrupt check of the backend's waits (interrupts.hpp), on Python: compiled per CPython, with the binding.
#include "interrupts.hpp"
#include "python_signals.hpp"

#include <torch/csrc/utils/pybind.h>

#include <atomic>

namespace ccl_torch {
namespace {

std::atomic<unsigned long> main_thread{0};  // PyThread_get_thread_ident() of Python's main thread

// Python runs signal handlers on its main thread only: elsewhere (the progress thread, a user's thread) there is
// nothing to ask, and taking Python's lock there every 50 ms would only compete with the main thread.
void raise_pending_interrupt() {
    if (PyThread_get_thread_ident() != main_thread.load(std::memory_order_relaxed)) return;
#if PY_VERSION_HEX >= 0x030D0000
    if (!Py_IsInitialized() || Py_IsFinalizing()) return;
#else
    if (!Py_IsInitialized() || _Py_IsFinalizing()) return;  // public as Py_IsFinalizing from 3.13
#endif
    pybind11::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw pybind11::error_already_set();  // torch's bindings raise it in Python
}

}  // namespace

void check_interrupts_on_the_main_thread() {
    main_thread = pybind11::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
    install_interrupt_check(raise_pending_interrupt);
}

}  // namespace ccl_torch
