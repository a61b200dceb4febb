// Python binding of the ccl backend. Compiled with the pybind11 that torch bundles, so that c10d::Store,
// c10d::Backend and intrusive_ptr holders are the very types torch.distributed uses.
#include "device_plugins.hpp"
#include "process_group_ccl.hpp"
#include "python_signals.hpp"
#include "status_board.hpp"
#include "torch_errors.hpp"

#include <ccl_core/progress.hpp>

#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

namespace py = pybind11;

PYBIND11_MODULE(CCL_TORCH_MODULE, m) {  // _C_torch2_13 etc.: one per torch minor (meson.build)
    m.doc() = "The ccl process-group backend (oneCCL through ccl-core) for CPU tensors";
    py::module_::import("torch.distributed");  // registers c10d's Python types first
    ccl_torch::define_python_errors(m.ptr());
    ccl_torch::check_interrupts_on_the_main_thread();

    py::class_<ccl_torch::ProcessGroupCCL, c10d::Backend, c10::intrusive_ptr<ccl_torch::ProcessGroupCCL>>(
        m, "ProcessGroupCCL",
        "ProcessGroupCCL(store, rank, size, timeout=timedelta(minutes=30)): the ccl backend on its own; "
        "init_process_group('ccl') creates one per group")
        .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         std::chrono::milliseconds timeout, bool enable_reconfigure) {
                 return c10::make_intrusive<ccl_torch::ProcessGroupCCL>(store, rank, size, timeout, "default",
                                                                        enable_reconfigure);
             }),
             py::arg("store"), py::arg("rank"), py::arg("size"),
             py::arg("timeout") = std::chrono::milliseconds(30 * 60 * 1000), py::arg("enable_reconfigure") = false,
             py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("shared_memory",
                               [](ccl_torch::ProcessGroupCCL& pg) { return pg.communicator()->shared_memory(); },
                               "True when allreduce, allgather, reduce_scatter and broadcast run through ccl-core's "
                               "shared-memory path (every rank of the group on this host) instead of oneCCL")
        .def_property_readonly("shared_memory_status",
                               [](ccl_torch::ProcessGroupCCL& pg) { return pg.communicator()->shared_memory_status(); },
                               "\"on\", or \"off: <why>\" (a rank elsewhere, CCL_CORE_SHM=0 on a rank, too small a "
                               "/dev/shm), as the group agreed at creation")
        .def_property_readonly("in_place_ops",
                               [](ccl_torch::ProcessGroupCCL& pg) { return pg.communicator()->in_place_ops(); },
                               "ops so far whose tensors were registered on every rank, and that read the peers' "
                               "tensors in place")
        .def("is_registered", &ccl_torch::ProcessGroupCCL::registered, py::arg("tensor"),
             "True when `tensor` lies in this group's registered memory (allocate_tensor): collectives whose tensors "
             "are registered on every rank read their peers' tensors in place")
        .def_property_readonly("hierarchy",
                               [](ccl_torch::ProcessGroupCCL& pg) { return pg.communicator()->hierarchy_status(); },
                               "\"on: 2 hosts x 2 ranks\" when allreduce, allgather, reduce_scatter and broadcast of "
                               "this group go inside each host first, then across hosts; else \"off: <why>\"")
        .def_property_readonly("shared_memory_allreduce", [](ccl_torch::ProcessGroupCCL& pg) {
            if (PyErr_WarnEx(PyExc_DeprecationWarning, "shared_memory_allreduce is deprecated: use shared_memory", 1) != 0) {
                throw py::error_already_set();
            }
            return pg.communicator()->shared_memory();
        });

    m.def("_register_device_plugin", [](const std::string& device, py::capsule capsule) {
              TORCH_CHECK_VALUE(std::string(capsule.name() ? capsule.name() : "") == ccl_torch::kDevicePluginCapsule,
                                "_register_device_plugin: expected a capsule named ", ccl_torch::kDevicePluginCapsule);
              auto* plugin = capsule.get_pointer<std::shared_ptr<ccl_torch::DevicePlugin>>();
              ccl_torch::register_device_plugin(c10::Device(device).type(), *plugin);
          },
          "Give the ccl backend a device type (called by plugins such as ccl-xpu; see ccl_torch/device_plugin.hpp)");
    m.def("_device_plugins", &ccl_torch::device_plugins, "device type -> plugin, for the registered device plugins");
    m.def("_explain", &ccl_torch::explain_all_groups, py::call_guard<py::gil_scoped_release>(),
          "Where the ranks of every ccl group of this process are (what SIGUSR1 prints)");
    m.def("_stop_publishing", &ccl_torch::stop_publishing, py::call_guard<py::gil_scoped_release>(),
          "Stop publishing where this rank is (registered with atexit)");
    m.def("_stop_completions", &ccl_core::stop_completions, py::call_guard<py::gil_scoped_release>(),
          "Stop completing futures and dropped works on ccl-core's progress thread (registered with atexit: "
          "completions may touch Python objects)");
}
