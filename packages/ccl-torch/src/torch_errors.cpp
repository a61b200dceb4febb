#include "torch_errors.hpp"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

namespace ccl_torch {
namespace {

// Owned by the _C module (kept alive by its attributes); null until the module is imported.
PyObject* argument_error_type = nullptr;
PyObject* dtype_error_type = nullptr;

// torch's error handlers around every Python-facing call (pybind11 translator and HANDLE_TH_ERRORS) turn a
// PyTorchError into its python_type() with the message; no GIL is needed where it is thrown.
struct ArgumentError : torch::PyTorchError {
    using torch::PyTorchError::PyTorchError;
    PyObject* python_type() override { return argument_error_type; }
};

struct DTypeError : torch::PyTorchError {
    using torch::PyTorchError::PyTorchError;
    PyObject* python_type() override { return dtype_error_type; }
};

}  // namespace

void throw_argument_error(const std::string& message) {
    if (!argument_error_type) TORCH_CHECK_VALUE(false, message);  // used from C++ without the Python module
    throw ArgumentError(message);
}

void throw_dtype_error(const std::string& message) {
    if (!dtype_error_type) TORCH_CHECK_TYPE(false, message);
    throw DTypeError(message);
}

void define_python_errors(void* module_ptr) {
    namespace py = pybind11;
    py::module_ m = py::reinterpret_borrow<py::module_>(static_cast<PyObject*>(module_ptr));
    auto make = [&](const char* name, py::tuple bases, const char* doc) {
        const std::string qualified = std::string("oneccl_bindings_for_pytorch.") + name;
        PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
        if (!type) throw py::error_already_set();
        m.attr(name) = py::reinterpret_steal<py::object>(type);
        return type;
    };
    argument_error_type = make("ArgumentError",
                               py::make_tuple(py::handle(PyExc_ValueError), py::handle(PyExc_RuntimeError)),
                               "A bad argument to a ccl collective (tensor, dtype, size, rank). Both a ValueError, "
                               "as torch's own checks raise, and a RuntimeError, as the original bindings and gloo "
                               "raise.");
    dtype_error_type = make("DTypeError",
                            py::make_tuple(py::handle(argument_error_type), py::handle(PyExc_TypeError)),
                            "A dtype the ccl backend cannot use here (unsupported, or tensors that disagree). "
                            "Also a TypeError.");
}

}  // namespace ccl_torch
