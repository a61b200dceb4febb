// The Python face of a Request, for ccl-core's module and ccl-xpu's: waits without the GIL and with Ctrl-C checks,
// and keeps the buffers its operation reads or writes alive until the operation is through, even when Python drops
// the request first (the progress thread then owns them; see Completion in ccl_core/progress.hpp).
// Header-only, built into each module with the pybind11 of that module.
#pragma once

#include <ccl_core/errors.hpp>
#include <ccl_core/request.hpp>

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <utility>

namespace ccl_core::python {

namespace py = pybind11;

// Buffers that hold Python objects, released with the GIL held on whichever thread lets them go.
template <class T>
std::shared_ptr<void> hold_with_gil(T buffers) {
    return std::shared_ptr<void>(new T(std::move(buffers)), [](void* p) {
        py::gil_scoped_acquire gil;
        delete static_cast<T*>(p);
    });
}

inline std::optional<std::chrono::milliseconds> to_ms(const std::optional<double>& seconds) {
    if (!seconds) return std::nullopt;
    if (*seconds < 0) throw InvalidArgument("timeout must be >= 0 seconds");
    return std::chrono::milliseconds(static_cast<long long>(*seconds * 1000.0));
}

class PyRequest {
public:
    PyRequest(Request request, std::shared_ptr<void> buffers)
        : request_(std::move(request)), buffers_(std::move(buffers)) {}
    PyRequest(const PyRequest&) = delete;
    PyRequest& operator=(const PyRequest&) = delete;
    ~PyRequest() {
        if (!buffers_ || !request_.operation() || request_.completed()) return;
        request_.complete_in_background({{}, std::move(buffers_)});
    }

    // True when done; never blocks; raises the operation's error.
    bool test() {
        const bool done = request_.test();
        if (done) buffers_.reset();
        return done;
    }
    // Waits without the GIL; Ctrl-C raises KeyboardInterrupt (and aborts the communicator).
    void wait(std::optional<std::chrono::milliseconds> timeout) {
        auto check_signals = [] {
            py::gil_scoped_acquire gil;
            if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        };
        {
            py::gil_scoped_release no_gil;
            request_.wait(timeout, check_signals);
        }
        buffers_.reset();
    }
    const Request& request() const { return request_; }

    // What every collective of a Python face returns: the request (async_op=True: it moves in the background while
    // Python computes), or None once it completed.
    static py::object finish(Request request, std::shared_ptr<void> buffers, bool async_op) {
        auto req = std::make_shared<PyRequest>(std::move(request), std::move(buffers));
        if (async_op) {
            req->request_.move_in_background();
            return py::cast(req);
        }
        req->wait(std::nullopt);
        return py::none();
    }

    // The Python class, module-local: each module that returns requests registers its own.
    static void bind(py::module_& m) {
        py::class_<PyRequest, std::shared_ptr<PyRequest>>(m, "Request", py::module_local(),
                                                         "An operation in flight (async_op=True)")
            .def("test", &PyRequest::test, "True when done; never blocks; raises the operation's error")
            .def("wait", [](PyRequest& r, std::optional<double> timeout) { r.wait(to_ms(timeout)); },
                 py::arg("timeout") = py::none(),
                 "Wait up to timeout seconds (default: the operation's timeout); raises CclTimeoutError")
            .def_property_readonly("completed", [](const PyRequest& r) { return r.request().completed(); })
            .def_property_readonly("op", [](const PyRequest& r) { return r.request().op_name(); });
    }

private:
    Request request_;
    std::shared_ptr<void> buffers_;
};

}  // namespace ccl_core::python
