// ccl_xpu._ccl_xpu: SYCL queues, USM buffers and the device communicator from Python, without torch. Built with
// the same pybind11 as ccl_core's module, so ccl_core.Store objects and ccl_core's exception types carry over.
#include <ccl_xpu/device_communicator.hpp>

#include <ccl_core/errors.hpp>
#include <ccl_core/python/py_request.hpp>
#include <ccl_core/types.hpp>

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

namespace py = pybind11;
using namespace ccl_xpu;

namespace {

std::string device_kind(const sycl::device& d) {
    if (d.is_gpu()) return "gpu";
    if (d.is_cpu()) return "cpu";
    if (d.is_accelerator()) return "accelerator";
    return "other";
}

std::string backend_name(const sycl::device& d) {
    switch (d.get_backend()) {
        case sycl::backend::opencl: return "opencl";
        case sycl::backend::ext_oneapi_level_zero: return "level_zero";
        default: return "other";
    }
}

// A SYCL queue made here (the default device of ONEAPI_DEVICE_SELECTOR), in order like torch's XPU streams.
struct Queue {
    std::shared_ptr<sycl::queue> queue;
    Queue() : queue(std::make_shared<sycl::queue>(sycl::default_selector_v, sycl::property::queue::in_order{})) {}
};

// USM memory of a queue's context: "shared" and "host" are readable from Python (buffer protocol), "device" is not.
struct UsmBuffer {
    std::shared_ptr<sycl::queue> queue;
    void* ptr = nullptr;
    std::size_t count = 0;
    ccl_core::DType dtype = ccl_core::DType::float32;
    std::string kind;

    UsmBuffer(const Queue& q, std::size_t n, const std::string& dtype_name, const std::string& usm)
        : queue(q.queue), count(n), dtype(ccl_core::parse_dtype(dtype_name)), kind(usm) {
        const std::size_t bytes = std::max<std::size_t>(1, n * ccl_core::dtype_size(dtype));
        if (usm == "shared") ptr = sycl::malloc_shared(bytes, *queue);
        else if (usm == "device") ptr = sycl::malloc_device(bytes, *queue);
        else if (usm == "host") ptr = sycl::malloc_host(bytes, *queue);
        else throw ccl_core::InvalidArgument("usm must be 'shared', 'device' or 'host', got '" + usm + "'");
        if (!ptr) throw ccl_core::BackendError("sycl::malloc_" + usm + " of " + std::to_string(bytes) + " bytes failed");
    }
    // An op that failed may still use the memory, and the runtime's free would wait for it for ever: the buffers of
    // such an op are never released (Completion::hold in ccl_core/progress.hpp), so this never runs for them.
    ~UsmBuffer() {
        if (ptr) sycl::free(ptr, *queue);
    }
    std::size_t nbytes() const { return count * ccl_core::dtype_size(dtype); }
};

std::string numpy_format(ccl_core::DType t) {
    using ccl_core::DType;
    switch (t) {
        case DType::int8: return "b";
        case DType::uint8: return "B";
        case DType::int16: return "h";
        case DType::uint16: case DType::bfloat16: return "H";
        case DType::int32: return "i";
        case DType::uint32: return "I";
        case DType::int64: return "q";
        case DType::uint64: return "Q";
        case DType::float16: return "e";
        case DType::float32: return "f";
        case DType::float64: return "d";
    }
    return "B";
}

void check_pair(const char* op, const UsmBuffer& a, const UsmBuffer& b, std::size_t b_count, const char* why) {
    if (a.dtype != b.dtype) {
        throw ccl_core::InvalidArgument(std::string(op) + ": buffers must share one dtype, got " +
                                        ccl_core::dtype_name(a.dtype) + " and " + ccl_core::dtype_name(b.dtype));
    }
    if (b.count != b_count) {
        throw ccl_core::InvalidArgument(std::string(op) + ": recv holds " + std::to_string(b.count) + " elements, expected " +
                                        std::to_string(b_count) + " (" + why + ")");
    }
}

using ccl_core::python::PyRequest;

py::object finish(ccl_core::Request request, std::vector<std::shared_ptr<UsmBuffer>> buffers, bool async_op) {
    return PyRequest::finish(std::move(request),
                             std::make_shared<std::vector<std::shared_ptr<UsmBuffer>>>(std::move(buffers)), async_op);
}

}  // namespace

PYBIND11_MODULE(_ccl_xpu, m) {
    m.doc() = "ccl-xpu: oneCCL's device path (SYCL USM memory ordered on a SYCL queue) without torch";
    py::module_::import("ccl_core");  // Store types and the exception translators

    m.def("device_path_problem", &device_path_problem,
          "What keeps oneCCL's device path from running here, or '' when nothing does");
    m.def("devices", [] {
        std::vector<std::tuple<std::string, std::string, std::string>> out;
        for (const auto& d : sycl::device::get_devices()) {
            out.emplace_back(d.get_info<sycl::info::device::name>(), device_kind(d), backend_name(d));
        }
        return out;
    }, "SYCL devices visible to this process: (name, kind, backend) each");

    py::class_<Queue>(m, "Queue", "An in-order SYCL queue on the default device (see ONEAPI_DEVICE_SELECTOR)")
        .def(py::init<>())
        .def_property_readonly("device_name", [](const Queue& q) { return q.queue->get_device().get_info<sycl::info::device::name>(); })
        .def_property_readonly("device_kind", [](const Queue& q) { return device_kind(q.queue->get_device()); })
        .def_property_readonly("backend", [](const Queue& q) { return backend_name(q.queue->get_device()); })
        .def_property_readonly("sycl_queue", [](const Queue& q) { return reinterpret_cast<std::uintptr_t>(q.queue.get()); },
                               "Address of the sycl::queue, as torch.xpu.Stream.sycl_queue gives it")
        .def("usm", [](const Queue& q, std::size_t count, const std::string& dtype, const std::string& kind) {
                 return std::make_shared<UsmBuffer>(q, count, dtype, kind);
             }, py::arg("count"), py::arg("dtype") = "float32", py::arg("kind") = "shared",
             "Allocate `count` elements of USM memory: kind 'shared' (default), 'host' or 'device'")
        .def("synchronize", [](const Queue& q) {
            py::gil_scoped_release release;
            q.queue->wait_and_throw();
        });

    py::class_<UsmBuffer, std::shared_ptr<UsmBuffer>>(m, "UsmBuffer", py::buffer_protocol())
        .def_property_readonly("count", [](const UsmBuffer& b) { return b.count; })
        .def_property_readonly("dtype", [](const UsmBuffer& b) { return std::string(ccl_core::dtype_name(b.dtype)); })
        .def_property_readonly("kind", [](const UsmBuffer& b) { return b.kind; })
        .def_property_readonly("address", [](const UsmBuffer& b) { return reinterpret_cast<std::uintptr_t>(b.ptr); })
        .def("copy_from", [](UsmBuffer& b, py::buffer src) {
                 py::buffer_info info = src.request();
                 const std::size_t bytes = static_cast<std::size_t>(info.size * info.itemsize);
                 if (bytes != b.nbytes()) {
                     throw ccl_core::InvalidArgument("copy_from: source has " + std::to_string(bytes) + " bytes, buffer " +
                                                     std::to_string(b.nbytes()));
                 }
                 b.queue->memcpy(b.ptr, info.ptr, bytes).wait();
             }, "Copy host data (any contiguous buffer of the same size in bytes) into this memory, through the queue")
        .def("copy_to", [](const UsmBuffer& b, py::buffer dst) {
                 py::buffer_info info = dst.request(true);
                 const std::size_t bytes = static_cast<std::size_t>(info.size * info.itemsize);
                 if (bytes != b.nbytes()) {
                     throw ccl_core::InvalidArgument("copy_to: destination has " + std::to_string(bytes) + " bytes, buffer " +
                                                     std::to_string(b.nbytes()));
                 }
                 b.queue->memcpy(info.ptr, b.ptr, bytes).wait();
             }, "Copy this memory into a writable host buffer of the same size in bytes, through the queue")
        .def_buffer([](UsmBuffer& b) -> py::buffer_info {
            if (b.kind == "device") {
                throw ccl_core::InvalidArgument("device USM memory is not readable from the host: use copy_to()");
            }
            const auto item = static_cast<py::ssize_t>(ccl_core::dtype_size(b.dtype));
            return py::buffer_info(b.ptr, item, numpy_format(b.dtype), 1, {static_cast<py::ssize_t>(b.count)}, {item});
        });

    PyRequest::bind(m);

    using Buf = std::shared_ptr<UsmBuffer>;
    using Comm = std::shared_ptr<DeviceCommunicator>;
    py::class_<DeviceCommunicator, Comm>(m, "DeviceCommunicator",
        "DeviceCommunicator(store, rank, size, queue, timeout=1800.0, name='default'): collectives on USM buffers, "
        "each ordered on `queue`. Every rank calls it; raises UnsupportedError when oneCCL's device path cannot run here.")
        .def(py::init([](std::shared_ptr<ccl_core::Store> store, int rank, int size, const Queue& queue, double timeout,
                         const std::string& name) {
                 ccl_core::CommunicatorOptions options;
                 options.timeout = std::chrono::milliseconds(static_cast<long long>(timeout * 1000));
                 options.name = name;
                 auto q = queue.queue;
                 py::gil_scoped_release release;
                 return DeviceCommunicator::create(std::move(store), rank, size, options, [q]() -> sycl::queue& { return *q; });
             }),
             py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("queue"), py::arg("timeout") = 1800.0,
             py::arg("name") = "default", py::keep_alive<1, 2>())
        .def_property_readonly("rank", &DeviceCommunicator::rank)
        .def_property_readonly("size", &DeviceCommunicator::size)
        .def_property_readonly("aborted", &DeviceCommunicator::aborted)
        .def("abort", &DeviceCommunicator::abort, py::arg("reason") = "aborted by the user")
        .def("allreduce", [](const Comm& c, Buf send, Buf recv, const std::string& op, bool async_op) {
                 check_pair("allreduce", *send, *recv, send->count, "same as send");
                 return finish(c->allreduce(send->ptr, recv->ptr, send->count, send->dtype, ccl_core::parse_reduce_op(op)), {send, recv}, async_op);
             }, py::arg("send"), py::arg("recv"), py::arg("op") = "sum", py::arg("async_op") = false)
        .def("broadcast", [](const Comm& c, Buf buf, int root, bool async_op) {
                 return finish(c->broadcast(buf->ptr, buf->count, buf->dtype, root), {buf}, async_op);
             }, py::arg("buffer"), py::arg("root") = 0, py::arg("async_op") = false)
        .def("allgather", [](const Comm& c, Buf send, Buf recv, bool async_op) {
                 check_pair("allgather", *send, *recv, send->count * static_cast<std::size_t>(c->size()), "size x send");
                 return finish(c->allgather(send->ptr, recv->ptr, send->count, send->dtype), {send, recv}, async_op);
             }, py::arg("send"), py::arg("recv"), py::arg("async_op") = false)
        .def("reduce_scatter", [](const Comm& c, Buf send, Buf recv, const std::string& op, bool async_op) {
                 check_pair("reduce_scatter", *send, *recv, send->count / static_cast<std::size_t>(c->size()), "send / size");
                 return finish(c->reduce_scatter(send->ptr, recv->ptr, recv->count, send->dtype, ccl_core::parse_reduce_op(op)), {send, recv}, async_op);
             }, py::arg("send"), py::arg("recv"), py::arg("op") = "sum", py::arg("async_op") = false)
        .def("alltoall", [](const Comm& c, Buf send, Buf recv, bool async_op) {
                 check_pair("alltoall", *send, *recv, send->count, "same as send");
                 return finish(c->alltoall(send->ptr, recv->ptr, send->count / static_cast<std::size_t>(c->size()), send->dtype), {send, recv}, async_op);
             }, py::arg("send"), py::arg("recv"), py::arg("async_op") = false)
        .def("barrier", [](const Comm& c, bool async_op) { return finish(c->barrier(), {}, async_op); },
             py::arg("async_op") = false);
}
