// The Python face of ccl-core: communicators over buffer-protocol objects (NumPy arrays, bytearray, ...).
// Buffers are checked here (contiguity, dtype, writability, sizes against counts), so that a mistake is a
// ValueError on the calling rank rather than memory oneCCL reads or writes out of bounds.
#include <ccl_core/communicator.hpp>
#include <ccl_core/errors.hpp>
#include <ccl_core/store.hpp>
#include <ccl_core/python/py_request.hpp>

#include "kernels/elementwise.hpp"
#include <ccl_core/oneccl/runtime.hpp>
#include "settings.hpp"
#include "testing/blocking_call_hold.hpp"
#include "testing/sigint_points.hpp"

#include <pybind11/chrono.h>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>

namespace py = pybind11;
using namespace ccl_core;

namespace {

// ---- buffers -----------------------------------------------------------------------------------------------

struct Buffer {
    std::shared_ptr<py::buffer_info> info;  // holds the Py_buffer (and so the object) while an op runs
    void* ptr = nullptr;
    std::size_t count = 0;
    DType dtype = DType::uint8;
};

DType dtype_of_format(const std::string& format, py::ssize_t itemsize, const char* op, const char* name) {
    std::string f = format;
    while (!f.empty() && std::string("@=<>!").find(f[0]) != std::string::npos) f.erase(0, 1);
    const char c = f.size() == 1 ? f[0] : '\0';
    const bool is_signed = std::string("bhilq").find(c) != std::string::npos;
    const bool is_unsigned = std::string("BHILQ").find(c) != std::string::npos;
    if (c && (is_signed || is_unsigned)) {
        switch (itemsize) {
            case 1: return is_signed ? DType::int8 : DType::uint8;
            case 2: return is_signed ? DType::int16 : DType::uint16;
            case 4: return is_signed ? DType::int32 : DType::uint32;
            case 8: return is_signed ? DType::int64 : DType::uint64;
        }
    }
    if (c == 'e') return DType::float16;
    if (c == 'f') return DType::float32;
    if (c == 'd') return DType::float64;
    throw Unsupported(std::string(op) + ": " + name + " has element format '" + format +
                      "', which ccl-core cannot reduce or move as a known dtype; pass dtype=... for "
                      "raw 2-byte data such as bfloat16, or convert the array");
}

Buffer take_buffer(const py::object& obj, bool writable, const std::optional<std::string>& dtype, const char* op,
                   const char* name) {
    if (obj.is_none()) throw InvalidArgument(std::string(op) + ": " + name + " is required");
    if (!PyObject_CheckBuffer(obj.ptr())) {
        throw InvalidArgument(std::string(op) + ": " + name + " must support the buffer protocol (a NumPy array, "
                              "bytearray, ...), got " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
    }
    Buffer b;
    try {
        b.info = std::make_shared<py::buffer_info>(py::reinterpret_borrow<py::buffer>(obj).request(writable));
    } catch (py::error_already_set& e) {
        throw InvalidArgument(std::string(op) + ": " + name + (writable ? " must be a writable buffer" : " is not a readable buffer") +
                              " (" + e.what() + ")");
    }
    const auto& info = *b.info;
    py::ssize_t expected = info.itemsize;
    for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
        if (info.shape[d] != 1 && info.strides[d] != expected) {
            throw InvalidArgument(std::string(op) + ": " + name + " must be C-contiguous (use numpy.ascontiguousarray)");
        }
        expected *= info.shape[d];
    }
    b.dtype = dtype ? parse_dtype(*dtype) : dtype_of_format(info.format, info.itemsize, op, name);
    if (static_cast<std::size_t>(info.itemsize) != dtype_size(b.dtype)) {
        throw InvalidArgument(std::string(op) + ": " + name + " has " + std::to_string(info.itemsize) +
                              "-byte elements but dtype " + dtype_name(b.dtype) + " has " +
                              std::to_string(dtype_size(b.dtype)));
    }
    b.ptr = info.ptr;
    b.count = static_cast<std::size_t>(info.size);
    return b;
}

void check_same_dtype(const char* op, const Buffer& a, const Buffer& b) {
    if (a.dtype != b.dtype) {
        throw InvalidArgument(std::string(op) + ": send is " + dtype_name(a.dtype) + " but recv is " + dtype_name(b.dtype));
    }
}

void check_count(const char* op, const char* name, const Buffer& b, std::size_t expected, const std::string& why) {
    if (b.count != expected) {
        throw InvalidArgument(std::string(op) + ": " + name + " has " + std::to_string(b.count) + " elements, expected " +
                              std::to_string(expected) + " (" + why + ")");
    }
}

// ---- requests ----------------------------------------------------------------------------------------------

using python::PyRequest;
using python::to_ms;

py::object finish(Request request, std::vector<Buffer> buffers, bool async_op) {
    return PyRequest::finish(std::move(request), python::hold_with_gil(std::move(buffers)), async_op);
}

// ---- stores ------------------------------------------------------------------------------------------------

// Lets Python objects with set(key, value) / get(key, timeout_seconds) act as stores.
class PyStore : public Store {
public:
    void set(const std::string& key, const Bytes& value) override {
        py::gil_scoped_acquire gil;
        py::function f = py::get_override(static_cast<const Store*>(this), "set");
        if (!f) throw Unsupported("Store subclass does not implement set()");
        f(key, py::bytes(reinterpret_cast<const char*>(value.data()), value.size()));
    }
    Bytes get(const std::string& key, Milliseconds timeout) override {
        py::gil_scoped_acquire gil;
        py::function f = py::get_override(static_cast<const Store*>(this), "get");
        if (!f) throw Unsupported("Store subclass does not implement get()");
        std::string v = f(key, timeout.count() / 1000.0).cast<std::string>();
        return Bytes(v.begin(), v.end());
    }
};

py::bytes store_get(Store& s, const std::string& key, double timeout_s) {
    Bytes v;
    {
        py::gil_scoped_release no_gil;
        v = s.get(key, std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000)));
    }
    return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

void store_set(Store& s, const std::string& key, const py::bytes& value) {
    std::string v = value;
    py::gil_scoped_release no_gil;
    s.set(key, Bytes(v.begin(), v.end()));
}

// ---- exceptions --------------------------------------------------------------------------------------------

void register_errors() {
    py::module_ errors = py::module_::import("ccl_core._errors");
    static py::handle base = py::object(errors.attr("CclError")).release();
    static py::handle invalid = py::object(errors.attr("InvalidArgumentError")).release();
    static py::handle unsupported = py::object(errors.attr("UnsupportedError")).release();
    static py::handle timeout = py::object(errors.attr("CclTimeoutError")).release();
    static py::handle aborted = py::object(errors.attr("CommunicatorAbortedError")).release();
    static py::handle backend = py::object(errors.attr("BackendError")).release();
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const InvalidArgument& e) {
            PyErr_SetString(invalid.ptr(), e.what());
        } catch (const Unsupported& e) {
            PyErr_SetString(unsupported.ptr(), e.what());
        } catch (const Timeout& e) {
            PyErr_SetString(timeout.ptr(), e.what());
        } catch (const CommunicatorAborted& e) {
            PyErr_SetString(aborted.ptr(), e.what());
        } catch (const BackendError& e) {
            PyErr_SetString(backend.ptr(), e.what());
        } catch (const Error& e) {
            PyErr_SetString(base.ptr(), e.what());
        }
    });
}

using CommPtr = std::shared_ptr<Communicator>;
using OptStr = std::optional<std::string>;

}  // namespace

PYBIND11_MODULE(_ccl_core, m) {
    m.doc() = "oneCCL collectives on buffer-protocol objects (see ccl_core.Communicator)";
    register_errors();

    m.def("oneccl_version", &oneccl_version, "Version of the loaded oneCCL");
    m.def("oneccl_library_path", &oneccl_library_path, "Path of the loaded libccl");
    m.def("kernel_level", &kernel_level,
          "Instruction-set level of ccl-core's reduction kernels in use (CCL_CORE_KERNEL, else the best the CPU has)");
    m.def("supported_kernel_levels", &supported_kernel_levels, "Kernel levels this build has and this CPU runs");
    m.def("progress_mode", &progress_mode,
          "How async operations move: 'thread' (in the background) or 'caller' (inside test/wait), CCL_CORE_PROGRESS");
    m.def("_stop_completions", &stop_completions, py::call_guard<py::gil_scoped_release>(),
          "Stop running completions on the progress thread (registered with atexit: they may touch Python objects)");
    m.def("_raise_sigint_at", [](const std::string& phase) {
              if (phase != "issue" && phase != "wait") throw InvalidArgument("_raise_sigint_at: expected 'issue' or 'wait'");
              detail::arm_sigint(phase == "issue" ? detail::SigintPoint::issue : detail::SigintPoint::wait);
          }, py::arg("phase"),
          "For tests: the next operation of this process that reaches `phase` ('issue' or 'wait') raises SIGINT, once "
          "(src/testing/sigint_points.hpp)");
    m.def("_hold_blocking_calls", [](double seconds) {
              detail::hold_blocking_calls(std::chrono::milliseconds(static_cast<long long>(seconds * 1000)));
          }, py::arg("seconds"),
          "For tests: the blocking-call thread keeps each call that long after it ended (src/testing/blocking_call_hold.hpp)");
    m.def("initialize_runtime", &initialize_runtime, "Apply ccl-core's oneCCL defaults and initialise oneCCL");
    m.def("env_defaults", [] {
        py::list out;
        for (const auto& d : env_defaults()) out.append(py::make_tuple(d.name, d.value, d.why));
        return out;
    }, "(name, value, why) of every variable ccl-core sets when the user has not");
    m.def("settings", [] {
        py::list out;
        for (const auto& s : detail::settings()) out.append(py::make_tuple(s.name, s.kind, s.default_value, s.meaning));
        return out;
    }, "(name, kind, default, meaning) of every environment setting of ccl-core's own");
    m.def("effective_environment", &effective_environment,
          "(name, value) of those variables as this process sees them now (os.environ does not see C setenv)");

    py::class_<Store, PyStore, std::shared_ptr<Store>>(m, "Store",
        "Key-value store for bootstrap. Subclass it in Python with set(key, value: bytes) and "
        "get(key, timeout_seconds) -> bytes, which waits until the key exists and raises on timeout; "
        "with timeout 0 it must answer at once (oneCCL polls keys that may not exist yet).")
        .def(py::init<>())
        .def("set", &store_set, py::arg("key"), py::arg("value"))
        .def("get", &store_get, py::arg("key"), py::arg("timeout") = 300.0);

    py::class_<FileStore, Store, std::shared_ptr<FileStore>>(m, "FileStore", "Store in a directory all ranks can see")
        .def(py::init<std::string>(), py::arg("directory"))
        .def_property_readonly("directory", &FileStore::directory);

    py::class_<TcpStore, Store, std::shared_ptr<TcpStore>>(m, "TcpStore",
        "Store served over TCP by the process created with is_server=True (binds only `host`)")
        .def(py::init([](const std::string& host, int port, bool is_server, double connect_timeout) {
                 TcpStore::Options o;
                 o.host = host;
                 o.port = port;
                 o.is_server = is_server;
                 o.connect_timeout = std::chrono::milliseconds(static_cast<long long>(connect_timeout * 1000));
                 py::gil_scoped_release no_gil;
                 return std::make_shared<TcpStore>(o);
             }),
             py::arg("host") = "127.0.0.1", py::arg("port") = 0, py::arg("is_server") = false,
             py::arg("connect_timeout") = 30.0)
        .def_property_readonly("port", &TcpStore::port);

    py::class_<PrefixStore, Store, std::shared_ptr<PrefixStore>>(m, "PrefixStore", "Puts every key under prefix/")
        // keep_alive: a store written in Python must outlive every C++ holder, or its overrides vanish
        .def(py::init<std::string, std::shared_ptr<Store>>(), py::arg("prefix"), py::arg("store"), py::keep_alive<1, 3>());

    PyRequest::bind(m);

    py::class_<Communicator, CommPtr>(m, "Communicator")
        .def(py::init([](std::shared_ptr<Store> store, int rank, int size, double timeout, const std::string& name) {
                 CommunicatorOptions o;
                 o.timeout = std::chrono::milliseconds(static_cast<long long>(timeout * 1000));
                 o.name = name;
                 py::gil_scoped_release no_gil;
                 return Communicator::create(std::move(store), rank, size, o);
             }),
             py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout") = 1800.0,
             py::arg("name") = "default", py::keep_alive<1, 2>(),
             "Meet the other ranks through `store` and create the oneCCL communicator (all ranks call this)")
        .def_property_readonly("rank", &Communicator::rank)
        .def_property_readonly("size", &Communicator::size)
        .def_property_readonly("name", [](const Communicator& c) { return c.options().name; })
        .def_property_readonly("timeout", [](const Communicator& c) { return c.options().timeout.count() / 1000.0; })
        .def_property_readonly("aborted", &Communicator::aborted)
        .def_property_readonly("local_ranks", &Communicator::local_ranks,
                               "ranks of this communicator on this host (by hostname and boot id)")
        .def_property_readonly("oversubscribed", &Communicator::oversubscribed,
                               "True when this host's ranks outnumber the cores this process may use")
        .def_property_readonly("shared_memory", &Communicator::shared_memory,
                               "True when allreduce, allgather, reduce_scatter and broadcast run through ccl-core's "
                               "shared-memory path instead of oneCCL")
        .def_property_readonly("hierarchical", &Communicator::hierarchical,
                               "True when allreduce, allgather, reduce_scatter and broadcast of a group spanning hosts "
                               "go inside each host first and then across hosts (from CCL_CORE_HIERARCHY_MIN_BYTES up)")
        .def_property_readonly("shared_memory_allreduce", [](const Communicator& c) {
            if (PyErr_WarnEx(PyExc_DeprecationWarning, "shared_memory_allreduce is deprecated: use shared_memory "
                             "(the path covers allgather, reduce_scatter and broadcast as well)", 1) != 0) {
                throw py::error_already_set();
            }
            return c.shared_memory();
        })
        .def_property_readonly("agreed", [](const Communicator& c) {
            py::dict d;
            d["shared_memory"] = c.shared_memory_status();
            d["hierarchy"] = c.hierarchy_status();
            d["local_ranks"] = c.local_ranks();
            d["oversubscribed"] = c.oversubscribed();
            d["kernels"] = kernel_level();
            d["progress"] = progress_mode();
            return d;
        }, "what this rank's group settled on at creation: the shared-memory path and the hierarchical path across hosts "
           "(each on, or off and why), ranks on this "
           "host, oversubscription, and this process's kernel level and progress mode")
        .def("abort", &Communicator::abort, py::arg("reason") = "aborted by the user")
        .def("allocate", [](const CommPtr& c, std::size_t count, const std::string& dtype) {
            const DType d = parse_dtype(dtype);
            if (d == DType::bfloat16) {
                throw Unsupported("allocate: NumPy has no bfloat16; allocate uint16 and reinterpret it");
            }
            std::shared_ptr<void> memory;
            {
                py::gil_scoped_release no_gil;
                memory = c->allocate(count * dtype_size(d));
            }
            const py::dtype type(dtype_name(d));
            if (!memory) return py::array(type, {count});  // ordinary memory: the op copies as usual
            auto* holder = new std::shared_ptr<void>(std::move(memory));
            py::capsule owner(holder, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
            return py::array(type, {count}, {static_cast<py::ssize_t>(dtype_size(d))}, holder->get(), owner);
        }, py::arg("count"), py::arg("dtype") = "float32",
           "A NumPy array of `count` elements in registered memory: when every rank's buffers of an allreduce, "
           "allgather, reduce_scatter or broadcast are such arrays, the op reads its peers' arrays in place. An "
           "ordinary array when the group cannot (ranks on several hosts, no shared-memory path, /dev/shm full)")
        .def_property_readonly("in_place_ops", &Communicator::in_place_ops,
                               "ops so far that read the peers' registered arrays in place (allocate)")
        .def("registered", [](const CommPtr& c, py::buffer b) {
            py::buffer_info info = b.request();
            return c->registered(info.ptr, static_cast<std::size_t>(info.size * info.itemsize));
        }, py::arg("buffer"), "True when `buffer` lies in this group's registered memory (allocate)")

        .def("allreduce", [](const CommPtr& c, py::object send, py::object recv, const std::string& op, bool async_op, OptStr dtype) {
            const char* name = "allreduce";
            Buffer s = take_buffer(send, recv.is_none(), dtype, name, "send");
            Buffer r = recv.is_none() ? s : take_buffer(recv, true, dtype, name, "recv");
            check_same_dtype(name, s, r);
            check_count(name, "recv", r, s.count, "same as send");
            ReduceOp rop = parse_reduce_op(op);
            return finish(c->allreduce(s.ptr, r.ptr, s.count, s.dtype, rop), std::vector<Buffer>{s, r}, async_op);
        }, py::arg("send"), py::arg("recv") = py::none(), py::arg("op") = "sum", py::arg("async_op") = false,
           py::arg("dtype") = py::none(), "Reduce `send` over all ranks into `recv` (in place when recv is None)")

        .def("reduce", [](const CommPtr& c, py::object send, py::object recv, int root, const std::string& op, bool async_op, OptStr dtype) {
            const char* name = "reduce";
            Buffer s = take_buffer(send, recv.is_none(), dtype, name, "send");
            Buffer r = recv.is_none() ? s : take_buffer(recv, true, dtype, name, "recv");
            check_same_dtype(name, s, r);
            check_count(name, "recv", r, s.count, "same as send");
            ReduceOp rop = parse_reduce_op(op);
            return finish(c->reduce(s.ptr, r.ptr, s.count, s.dtype, rop, root), std::vector<Buffer>{s, r}, async_op);
        }, py::arg("send"), py::arg("recv") = py::none(), py::arg("root") = 0, py::arg("op") = "sum",
           py::arg("async_op") = false, py::arg("dtype") = py::none(), "Reduce onto `root` (recv meaningful there)")

        .def("broadcast", [](const CommPtr& c, py::object buffer, int root, bool async_op, OptStr dtype) {
            Buffer b = take_buffer(buffer, true, dtype, "broadcast", "buffer");
            return finish(c->broadcast(b.ptr, b.count, b.dtype, root), std::vector<Buffer>{b}, async_op);
        }, py::arg("buffer"), py::arg("root") = 0, py::arg("async_op") = false, py::arg("dtype") = py::none())

        .def("allgather", [](const CommPtr& c, py::object send, py::object recv, bool async_op, OptStr dtype) {
            const char* name = "allgather";
            Buffer s = take_buffer(send, false, dtype, name, "send");
            Buffer r = take_buffer(recv, true, dtype, name, "recv");
            check_same_dtype(name, s, r);
            check_count(name, "recv", r, s.count * c->size(), "send's count x group size");
            return finish(c->allgather(s.ptr, r.ptr, s.count, s.dtype), std::vector<Buffer>{s, r}, async_op);
        }, py::arg("send"), py::arg("recv"), py::arg("async_op") = false, py::arg("dtype") = py::none())

        .def("allgatherv", [](const CommPtr& c, py::object send, py::object recv, std::vector<std::size_t> recv_counts, bool async_op, OptStr dtype) {
            const char* name = "allgatherv";
            Buffer s = take_buffer(send, false, dtype, name, "send");
            Buffer r = take_buffer(recv, true, dtype, name, "recv");
            check_same_dtype(name, s, r);
            std::size_t sum = 0;
            for (auto n : recv_counts) sum += n;
            check_count(name, "recv", r, sum, "sum of recv_counts");
            return finish(c->allgatherv(s.ptr, s.count, r.ptr, recv_counts, s.dtype), std::vector<Buffer>{s, r}, async_op);
        }, py::arg("send"), py::arg("recv"), py::arg("recv_counts"), py::arg("async_op") = false, py::arg("dtype") = py::none())

        .def("reduce_scatter", [](const CommPtr& c, py::object send, py::object recv, const std::string& op, bool async_op, OptStr dtype) {
            const char* name = "reduce_scatter";
            Buffer s = take_buffer(send, false, dtype, name, "send");
            Buffer r = take_buffer(recv, true, dtype, name, "recv");
            check_same_dtype(name, s, r);
            check_count(name, "send", s, r.count * c->size(), "recv's count x group size");
            ReduceOp rop = parse_reduce_op(op);
            return finish(c->reduce_scatter(s.ptr, r.ptr, r.count, s.dtype, rop), std::vector<Buffer>{s, r}, async_op);
        }, py::arg("send"), py::arg("recv"), py::arg("op") = "sum", py::arg("async_op") = false, py::arg("dtype") = py::none())

        .def("alltoall", [](const CommPtr& c, py::object send, py::object recv, bool async_op, OptStr dtype) {
            const char* name = "alltoall";
            Buffer s = take_buffer(send, false, dtype, name, "send");
            Buffer r = take_buffer(recv, true, dtype, name, "recv");
            check_same_dtype(name, s, r);
            const std::size_t n = static_cast<std::size_t>(c->size());
            if (s.count % n != 0) {
                throw InvalidArgument("alltoall: send has " + std::to_string(s.count) + " elements, not a multiple of the group size " + std::to_string(n));
            }
            check_count(name, "recv", r, s.count, "same as send");
            return finish(c->alltoall(s.ptr, r.ptr, s.count / n, s.dtype), std::vector<Buffer>{s, r}, async_op);
        }, py::arg("send"), py::arg("recv"), py::arg("async_op") = false, py::arg("dtype") = py::none())

        .def("alltoallv", [](const CommPtr& c, py::object send, std::vector<std::size_t> send_counts, py::object recv, std::vector<std::size_t> recv_counts, bool async_op, OptStr dtype) {
            const char* name = "alltoallv";
            Buffer s = take_buffer(send, false, dtype, name, "send");
            Buffer r = take_buffer(recv, true, dtype, name, "recv");
            check_same_dtype(name, s, r);
            std::size_t ssum = 0, rsum = 0;
            for (auto n : send_counts) ssum += n;
            for (auto n : recv_counts) rsum += n;
            check_count(name, "send", s, ssum, "sum of send_counts");
            check_count(name, "recv", r, rsum, "sum of recv_counts");
            return finish(c->alltoallv(s.ptr, send_counts, r.ptr, recv_counts, s.dtype), std::vector<Buffer>{s, r}, async_op);
        }, py::arg("send"), py::arg("send_counts"), py::arg("recv"), py::arg("recv_counts"), py::arg("async_op") = false,
           py::arg("dtype") = py::none())

        .def("gather", [](const CommPtr& c, py::object send, py::object recv, int root, bool async_op, OptStr dtype) {
            const char* name = "gather";
            Buffer s = take_buffer(send, false, dtype, name, "send");
            std::vector<Buffer> keep{s};
            void* rptr = nullptr;
            if (c->rank() == root) {
                Buffer r = take_buffer(recv, true, dtype, name, "recv");
                check_same_dtype(name, s, r);
                check_count(name, "recv", r, s.count * c->size(), "send's count x group size");
                rptr = r.ptr;
                keep.push_back(r);
            }
            return finish(c->gather(s.ptr, rptr, s.count, s.dtype, root), keep, async_op);
        }, py::arg("send"), py::arg("recv") = py::none(), py::arg("root") = 0, py::arg("async_op") = false,
           py::arg("dtype") = py::none(), "Gather every rank's `send` into `recv` on root (recv needed on root only)")

        .def("scatter", [](const CommPtr& c, py::object send, py::object recv, int root, bool async_op, OptStr dtype) {
            const char* name = "scatter";
            Buffer r = take_buffer(recv, true, dtype, name, "recv");
            std::vector<Buffer> keep{r};
            const void* sptr = nullptr;
            if (c->rank() == root) {
                Buffer s = take_buffer(send, false, dtype, name, "send");
                check_same_dtype(name, s, r);
                check_count(name, "send", s, r.count * c->size(), "recv's count x group size");
                sptr = s.ptr;
                keep.push_back(s);
            }
            return finish(c->scatter(sptr, r.ptr, r.count, r.dtype, root), keep, async_op);
        }, py::arg("send"), py::arg("recv"), py::arg("root") = 0, py::arg("async_op") = false, py::arg("dtype") = py::none(),
           "Scatter root's `send` (group size x recv's count) into every rank's `recv` (send needed on root only)")

        .def("send", [](const CommPtr& c, py::object buffer, int peer, bool async_op, OptStr dtype) {
            Buffer b = take_buffer(buffer, false, dtype, "send", "buffer");
            return finish(c->send(b.ptr, b.count, b.dtype, peer), std::vector<Buffer>{b}, async_op);
        }, py::arg("buffer"), py::arg("peer"), py::arg("async_op") = false, py::arg("dtype") = py::none())

        .def("recv", [](const CommPtr& c, py::object buffer, int peer, bool async_op, OptStr dtype) {
            Buffer b = take_buffer(buffer, true, dtype, "recv", "buffer");
            return finish(c->recv(b.ptr, b.count, b.dtype, peer), std::vector<Buffer>{b}, async_op);
        }, py::arg("buffer"), py::arg("peer"), py::arg("async_op") = false, py::arg("dtype") = py::none())

        .def("barrier", [](const CommPtr& c, bool async_op) {
            return finish(c->barrier(), std::vector<Buffer>{}, async_op);
        }, py::arg("async_op") = false)

        .def("subgroup", [](const CommPtr& c, const std::vector<int>& ranks, const std::string& name) {
            py::gil_scoped_release no_gil;
            return c->subgroup(ranks, name);
        }, py::arg("ranks"), py::arg("name") = "",
           "Communicator over `ranks` (every rank calls; returns None on non-members)");
}
