#include "process_group_ccl.hpp"

#include "c10d_store.hpp"
#include "device_plugins.hpp"
#include "future_completer.hpp"
#include "torch_errors.hpp"

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <sstream>

#include <unistd.h>

namespace ccl_torch {
namespace {

// Set to 0 from a debugger to let a rank started with ONECCL_BINDINGS_FOR_PYTORCH_ENV_WAIT_GDB=1 go on.
volatile int ccl_torch_wait_for_gdb = 1;

bool env_flag(const char* name) {
    const char* v = std::getenv(name);
    return v && *v && std::string(v) != "0";
}

std::string tensor_list(const std::vector<at::Tensor>& ts) {
    std::string s;
    for (const auto& t : ts) s += (s.empty() ? "" : ", ") + describe(t);
    return s;
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* op) {
    CCL_CHECK_ARGUMENT(ts.size() == 1, op, ": expects exactly one tensor, got ", ts.size());
    return ts[0];
}

int64_t sum_of(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

void check_peer(int peer, int rank, int size, const char* op) {
    CCL_CHECK_ARGUMENT(peer >= 0 && peer < size && peer != rank, op, ": unexpected rank ", peer, " as peer of rank ", rank,
                       "; a group of ", size, " ranks has ranks 0..", size - 1, ", and a rank cannot be its own peer");
}

void check_root(int64_t root, int size, const char* op) {
    CCL_CHECK_ARGUMENT(root >= 0 && root < size, op, ": unexpected rank ", root, " as root; a group of ", size,
                       " ranks has ranks 0..", size - 1);
}

// Checks that need no work: every op runs all of them on all its tensors before it makes its work (which advances
// the group's sequence number) or issues anything, so one bad tensor leaves no rank out of step.
void check_reducible(const at::Tensor& t, const c10d::ReduceOp& rop, const char* op) {
    check_dense(t, op, "tensor");
    (void)core_dtype(t.scalar_type(), op);
    (void)plan_reduction(rop, t.scalar_type(), op);
}

void check_allgather_pair(const at::Tensor& output, const at::Tensor& input, int size, const char* op) {
    check_dense(input, op, "input");
    check_dense(output, op, "output");
    check_same_dtype(input, output, op);
    (void)core_dtype(input.scalar_type(), op);
    CCL_CHECK_ARGUMENT(output.numel() == input.numel() * size, op,
                       ": output tensor size must be equal to world_size times input tensor size (output has ",
                       output.numel(), " elements, input ", input.numel(), ", world_size ", size, ")");
}

void check_reduce_scatter_pair(const at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& rop, int size,
                               const char* op) {
    check_dense(input, op, "input");
    check_dense(output, op, "output");
    check_same_dtype(input, output, op);
    check_reducible(input, rop, op);
    check_same_numel(input, output.numel() * size, op, "input", "output's numel x group size");
}

// outs[r] = flat[r * n, (r + 1) * n), reshaped: the last step of every gather into a list of tensors.
void split_into(const at::Tensor& flat, std::vector<at::Tensor>& outs, int64_t n) {
    for (std::size_t r = 0; r < outs.size(); ++r) outs[r].copy_(flat.narrow(0, r * n, n).view(outs[r].sizes()));
}

}  // namespace

ProcessGroupCCL::ProcessGroupCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                 std::chrono::milliseconds timeout, const std::string& name)
    : c10d::Backend(rank, size), timeout_(timeout), completer_(std::make_shared<FutureCompleter>()),
      verbose_(env_flag("ONECCL_BINDINGS_FOR_PYTORCH_ENV_VERBOSE")) {
    if (env_flag("ONECCL_BINDINGS_FOR_PYTORCH_ENV_WAIT_GDB")) {
        std::fprintf(stderr, "[oneccl_bindings_for_pytorch] rank %d waiting for a debugger: gdb -p %d, then "
                     "'set var ccl_torch_wait_for_gdb = 0' and 'continue'\n", rank, static_cast<int>(::getpid()));
        while (ccl_torch_wait_for_gdb) ::sleep(1);
    }
    CCL_CHECK_ARGUMENT(timeout.count() > 0, "ProcessGroupCCL: timeout must be positive, got ", timeout.count(), " ms");
    ccl_core::CommunicatorOptions options;
    options.timeout = timeout;
    options.name = name;
    store_ = std::make_shared<C10dStore>(store);
    any_source_ = std::make_shared<AnySourceLedger>(store, rank, size);
    comm_ = translate_errors([&] { return ccl_core::Communicator::create(store_, rank, size, options); });
}

ProcessGroupCCL::~ProcessGroupCCL() { completer_->shutdown(); }

// The collectives for the op's device: ccl-core's communicator for CPU tensors, a plugin's for others (created
// at the group's first op on that device; every rank gets there in the same op).
ccl_core::Collectives& ProcessGroupCCL::engine_for(const char* op, const std::vector<at::Tensor>& inputs,
                                                   const std::vector<at::Tensor>& outputs) {
    const at::Tensor* first = nullptr;
    for (const auto* list : {&inputs, &outputs}) {
        for (const auto& t : *list) {
            if (!t.defined()) continue;
            if (!first) first = &t;
            CCL_CHECK_ARGUMENT(t.device() == first->device(), op, ": every tensor must be on one device, got ",
                              first->device(), " and ", t.device());
        }
    }
    if (!first || first->device().is_cpu()) return *comm_;
    const c10::Device device = first->device();
    auto plugin = device_plugin(device.type());
    CCL_CHECK_ARGUMENT(plugin, op, ": tensor is on ", device, "; this ccl backend serves CPU tensors",
                      device.type() == c10::DeviceType::XPU ? " (install ccl-xpu for XPU tensors)" : "");
    translate_errors([&] { plugin->check_usable(device); });
    std::lock_guard<std::mutex> lock(device_mutex_);
    auto& engine = device_engines_[device.type()];
    if (!engine) {
        const std::string type_name = c10::DeviceTypeName(device.type(), true);
        ccl_core::CommunicatorOptions options = comm_->options();
        options.name += "/" + type_name;
        auto store = std::make_shared<ccl_core::PrefixStore>("ccl_torch/device/" + type_name, store_);
        engine = translate_errors([&] { return plugin->create(store, getRank(), getSize(), options, device); });
    }
    return *engine;
}

std::chrono::milliseconds ProcessGroupCCL::effective_timeout(std::chrono::milliseconds op_timeout) const {
    return op_timeout == c10d::kUnsetTimeout || op_timeout.count() <= 0 ? timeout_ : op_timeout;
}

c10::intrusive_ptr<CCLWork> ProcessGroupCCL::make_work(c10d::OpType type, const char* op,
                                                       const std::vector<at::Tensor>& inputs,
                                                       std::vector<at::Tensor> outputs,
                                                       std::chrono::milliseconds op_timeout) {
    // Profiler name as in the original bindings: "oneccl_bindings_for_pytorch::allreduce".
    static thread_local std::string title;
    title = std::string("oneccl_bindings_for_pytorch::") + op;
    ccl_core::Collectives& on = engine_for(op, inputs, outputs);
    auto work = c10::make_intrusive<CCLWork>(getRank(), type, title.c_str(), inputs, std::move(outputs),
                                            effective_timeout(op_timeout), completer_);
    work->set_engine(on);
    if (verbose_) {
        std::ostringstream line;
        line << "rank " << getRank() << "/" << getSize() << " " << op << " [" << tensor_list(inputs) << "]";
        std::fprintf(stderr, "[oneccl_bindings_for_pytorch] %s issued\n", line.str().c_str());
        work->set_verbose(line.str());
    }
    if (coalescing_) coalesced_.push_back(work);
    ++seq_;
    return work;
}

template <class Check, class Issue>
c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::launch(c10d::OpType type, const char* op,
                                                       std::chrono::milliseconds timeout, bool async_op, Check&& check,
                                                       Issue&& issue) {
    OpTensors tensors = check();
    auto work = make_work(type, op, tensors.inputs, std::move(tensors.outputs), timeout);
    issue(*work);
    if (async_op) work->move_in_background();
    return work;
}

// ---- reductions ----------------------------------------------------------------------------------------------

// Issues the reduction of one checked tensor (check_reducible): allreduce when root < 0, else reduce to root.
void ProcessGroupCCL::reduce_into(CCLWork& work, const char* op, at::Tensor& tensor, const c10d::ReduceOp& rop,
                                  int root) {
    Reduction plan = plan_reduction(rop, tensor.scalar_type(), op);
    if (plan.kind == ReduceKind::bitwise) {
        // Everyone gathers everyone's tensor, then reduces locally (oneCCL has no bitwise ops).
        Buffer in = input_buffer(tensor, op);
        at::Tensor gathered = at::empty({getSize(), tensor.numel()}, tensor.options());
        work.add(translate_errors([&] { return work.engine().allgather(in.data(), gathered.data_ptr(), in.count, in.dtype); }));
        work.keep_alive(in.tensor);
        work.finish_steps().push_back([plan, gathered, tensor]() mutable { bitwise_reduce(plan, gathered, tensor); });
        return;
    }
    Buffer buf = output_buffer(tensor, op, work.finish_steps());
    apply_premul(plan, buf.tensor);
    if (!tensor.device().is_cpu() && plan.engine_op == ccl_core::ReduceOp::avg) {
        // ccl-core divides host memory itself; on a device the division is a torch op on the device's stream (before
        // any copy back from a staging buffer), and only where the result lands
        plan.engine_op = ccl_core::ReduceOp::sum;
        if (root < 0 || root == getRank()) {
            const int size = getSize();
            work.finish_steps().insert(work.finish_steps().begin(), [buf, size]() mutable { buf.tensor.div_(size); });
        }
    }
    work.add(translate_errors([&] {
        return root < 0 ? work.engine().allreduce(buf.data(), buf.data(), buf.count, buf.dtype, plan.engine_op)
                        : work.engine().reduce(buf.data(), buf.data(), buf.count, buf.dtype, plan.engine_op, root);
    }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::allreduce_all(const char* op, c10d::OpType type,
                                                              std::vector<at::Tensor>& tensors, const c10d::ReduceOp& rop,
                                                              std::chrono::milliseconds timeout, bool async_op) {
    return launch(type, op, timeout, async_op, [&] {
        CCL_CHECK_ARGUMENT(!tensors.empty(), op, ": no tensors given");
        for (const auto& t : tensors) check_reducible(t, rop, op);
        return OpTensors{tensors, tensors};
    }, [&](CCLWork& work) {
        for (auto& t : tensors) reduce_into(work, op, t, rop, -1);
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
    return allreduce_all("allreduce", c10d::OpType::ALLREDUCE, tensors, opts.reduceOp, opts.timeout, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                    const c10d::AllreduceCoalescedOptions& opts) {
    return allreduce_all("allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors, opts.reduceOp, opts.timeout,
                         opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
    const char* op = "reduce";
    at::Tensor t;
    return launch(c10d::OpType::REDUCE, op, opts.timeout, opts.asyncOp, [&] {
        t = single(tensors, op);
        check_root(opts.rootRank, getSize(), op);
        check_reducible(t, opts.reduceOp, op);
        return OpTensors{tensors, tensors};
    }, [&](CCLWork& work) { reduce_into(work, op, t, opts.reduceOp, static_cast<int>(opts.rootRank)); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
    const char* op = "broadcast";
    at::Tensor t;
    return launch(c10d::OpType::BROADCAST, op, opts.timeout, opts.asyncOp, [&] {
        t = single(tensors, op);
        check_dense(t, op, "tensor");
        (void)core_dtype(t.scalar_type(), op);
        check_root(opts.rootRank, getSize(), op);
        return OpTensors{tensors, tensors};
    }, [&](CCLWork& work) {
        Buffer buf = output_buffer(t, op, work.finish_steps());
        work.add(translate_errors([&] {
            return work.engine().broadcast(buf.data(), buf.count, buf.dtype, static_cast<int>(opts.rootRank));
        }));
    });
}

// ---- gathers ------------------------------------------------------------------------------------------------

// Issues the allgather of one checked pair (check_allgather_pair).
void ProcessGroupCCL::allgather_flat(CCLWork& work, const char* op, at::Tensor& output, const at::Tensor& input) {
    Buffer in = input_buffer(input, op);
    Buffer out = output_buffer(output, op, work.finish_steps());
    work.keep_alive(in.tensor);
    work.add(translate_errors([&] { return work.engine().allgather(in.data(), out.data(), in.count, in.dtype); }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                const c10d::AllgatherOptions& opts) {
    const char* op = "allgather_into_tensor";
    return launch(c10d::OpType::_ALLGATHER_BASE, op, opts.timeout, opts.asyncOp, [&] {
        check_allgather_pair(output, input, getSize(), op);
        return OpTensors{{input}, {output}};
    }, [&](CCLWork& work) { allgather_flat(work, op, output, input); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                std::vector<at::Tensor>& inputs,
                                                                                const c10d::AllgatherOptions& opts) {
    const char* op = "allgather_into_tensor_coalesced";
    return launch(c10d::OpType::COALESCED, op, opts.timeout, opts.asyncOp, [&] {
        CCL_CHECK_ARGUMENT(outputs.size() == inputs.size(), op, ": ", outputs.size(), " outputs for ", inputs.size(),
                           " inputs");
        for (std::size_t i = 0; i < inputs.size(); ++i) check_allgather_pair(outputs[i], inputs[i], getSize(), op);
        return OpTensors{inputs, outputs};
    }, [&](CCLWork& work) {
        for (std::size_t i = 0; i < inputs.size(); ++i) allgather_flat(work, op, outputs[i], inputs[i]);
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllgatherOptions& opts) {
    const char* op = "allgather";
    at::Tensor input;
    return launch(c10d::OpType::ALLGATHER, op, opts.timeout, opts.asyncOp, [&] {
        input = single(inputs, op);
        check_dense(input, op, "input");
        (void)core_dtype(input.scalar_type(), op);
        CCL_CHECK_ARGUMENT(outputs.size() == 1, op, ": expects one output list, got ", outputs.size());
        CCL_CHECK_ARGUMENT(static_cast<int>(outputs[0].size()) == getSize(), op, ": output list has ",
                           outputs[0].size(), " tensors, expected one per rank (", getSize(), ")");
        for (auto& o : outputs[0]) {
            check_dense(o, op, "output");
            check_same_dtype(input, o, op);
            check_same_numel(o, input.numel(), op, "an output tensor", "same as input");
        }
        return OpTensors{inputs, outputs[0]};
    }, [&](CCLWork& work) {
        at::Tensor flat = at::empty({input.numel() * getSize()}, input.options());
        allgather_flat(work, op, flat, input);
        work.finish_steps().push_back([flat, outs = outputs[0], n = input.numel()]() mutable { split_into(flat, outs, n); });
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                    std::vector<at::Tensor>& inputs,
                                                                    const c10d::AllgatherOptions& opts) {
    const char* op = "allgather_coalesced";
    return launch(c10d::OpType::ALLGATHER_COALESCED, op, opts.timeout, opts.asyncOp, [&] {
        CCL_CHECK_ARGUMENT(outputs.size() == static_cast<std::size_t>(getSize()), op,
                           ": expects one output list per rank");
        for (int r = 0; r < getSize(); ++r) {
            CCL_CHECK_ARGUMENT(outputs[r].size() == inputs.size(), op, ": output list ", r, " has ", outputs[r].size(),
                               " tensors, expected ", inputs.size());
            for (std::size_t i = 0; i < inputs.size(); ++i) {
                check_dense(inputs[i], op, "input");
                check_dense(outputs[r][i], op, "output");
                check_same_dtype(inputs[i], outputs[r][i], op);
                (void)core_dtype(inputs[i].scalar_type(), op);
                check_same_numel(outputs[r][i], inputs[i].numel(), op, "an output tensor", "same as its input");
            }
        }
        return OpTensors{inputs, {}};
    }, [&](CCLWork& work) {
        // outputs[r][i] receives rank r's inputs[i]: gather each input, then scatter into the lists.
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            at::Tensor flat = at::empty({inputs[i].numel() * getSize()}, inputs[i].options());
            allgather_flat(work, op, flat, inputs[i]);
            work.finish_steps().push_back([flat, i, n = inputs[i].numel(), outs = outputs]() mutable {
                for (std::size_t r = 0; r < outs.size(); ++r) {
                    outs[r][i].copy_(flat.narrow(0, r * n, n).view(outs[r][i].sizes()));
                }
            });
        }
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::GatherOptions& opts) {
    const char* op = "gather";
    const int root = static_cast<int>(opts.rootRank);
    at::Tensor input;
    std::vector<at::Tensor> outs;
    return launch(c10d::OpType::GATHER, op, opts.timeout, opts.asyncOp, [&] {
        input = single(inputs, op);
        check_dense(input, op, "input");
        (void)core_dtype(input.scalar_type(), op);
        check_root(root, getSize(), op);
        if (getRank() == root) {
            CCL_CHECK_ARGUMENT(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(), op,
                               ": the root needs a list of ", getSize(), " output tensors");
            outs = outputs[0];
            for (auto& o : outs) {
                check_dense(o, op, "output");
                check_same_dtype(input, o, op);
                check_same_numel(o, input.numel(), op, "an output tensor", "same as input");
            }
        } else {
            CCL_CHECK_ARGUMENT(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), op,
                               ": only the root passes output tensors");
        }
        return OpTensors{inputs, outs};
    }, [&](CCLWork& work) {
        Buffer in = input_buffer(input, op);
        work.keep_alive(in.tensor);
        at::Tensor flat = getRank() == root ? at::empty({input.numel() * getSize()}, input.options()) : at::Tensor();
        work.add(translate_errors([&] {
            return work.engine().gather(in.data(), flat.defined() ? flat.data_ptr() : nullptr, in.count, in.dtype, root);
        }));
        if (flat.defined()) {
            work.finish_steps().push_back([flat, outs, n = input.numel()]() mutable { split_into(flat, outs, n); });
        }
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::scatter(std::vector<at::Tensor>& outputs,
                                                        std::vector<std::vector<at::Tensor>>& inputs,
                                                        const c10d::ScatterOptions& opts) {
    const char* op = "scatter";
    const int root = static_cast<int>(opts.rootRank);
    at::Tensor output, flat;  // flat: the root's inputs, concatenated
    return launch(c10d::OpType::SCATTER, op, opts.timeout, opts.asyncOp, [&] {
        output = single(outputs, op);
        check_dense(output, op, "output");
        (void)core_dtype(output.scalar_type(), op);
        check_root(root, getSize(), op);
        if (getRank() == root) {
            CCL_CHECK_ARGUMENT(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), op,
                               ": the root needs a list of ", getSize(), " input tensors");
            for (auto& i : inputs[0]) {
                check_dense(i, op, "input");
                check_same_dtype(i, output, op);
                check_same_numel(i, output.numel(), op, "an input tensor", "same as output");
            }
            std::vector<at::Tensor> flats;
            for (auto& i : inputs[0]) flats.push_back(i.reshape({-1}));
            flat = at::cat(flats);
        } else {
            CCL_CHECK_ARGUMENT(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), op,
                               ": only the root passes input tensors");
        }
        return OpTensors{flat.defined() ? std::vector<at::Tensor>{flat} : std::vector<at::Tensor>{}, outputs};
    }, [&](CCLWork& work) {
        Buffer out = output_buffer(output, op, work.finish_steps());
        work.add(translate_errors([&] {
            return work.engine().scatter(flat.defined() ? flat.data_ptr() : nullptr, out.data(), out.count, out.dtype, root);
        }));
        if (flat.defined()) work.keep_alive(flat);
    });
}

// ---- reduce-scatter -----------------------------------------------------------------------------------------

// Issues the reduce-scatter of one checked pair (check_reduce_scatter_pair).
void ProcessGroupCCL::reduce_scatter_flat(CCLWork& work, const char* op, at::Tensor& output, const at::Tensor& input,
                                          const c10d::ReduceOp& rop) {
    Reduction plan = plan_reduction(rop, input.scalar_type(), op);
    if (plan.kind == ReduceKind::bitwise) {
        Buffer in = input_buffer(input, op);
        at::Tensor gathered = at::empty({getSize(), input.numel()}, input.options());
        work.add(translate_errors([&] { return work.engine().allgather(in.data(), gathered.data_ptr(), in.count, in.dtype); }));
        const int64_t n = output.numel();
        work.keep_alive(in.tensor);
        work.finish_steps().push_back([plan, gathered, output, n, r = getRank()]() mutable {
            bitwise_reduce(plan, gathered.narrow(1, r * n, n), output);
        });
        return;
    }
    at::Tensor src = input.contiguous();
    if (plan.torch_op == c10d::ReduceOp::PREMUL_SUM) {
        src = src.clone();  // never scale the caller's input
        apply_premul(plan, src);
    }
    Buffer in = input_buffer(src, op);
    Buffer out = output_buffer(output, op, work.finish_steps());
    work.add(translate_errors([&] {
        return work.engine().reduce_scatter(in.data(), out.data(), out.count, out.dtype, plan.engine_op);
    }));
    work.keep_alive(src);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::ReduceScatterOptions& opts) {
    const char* op = "reduce_scatter_tensor";
    return launch(c10d::OpType::_REDUCE_SCATTER_BASE, op, opts.timeout, opts.asyncOp, [&] {
        check_reduce_scatter_pair(output, input, opts.reduceOp, getSize(), op);
        return OpTensors{{input}, {output}};
    }, [&](CCLWork& work) { reduce_scatter_flat(work, op, output, input, opts.reduceOp); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                std::vector<at::Tensor>& inputs,
                                                                                const c10d::ReduceScatterOptions& opts) {
    const char* op = "reduce_scatter_tensor_coalesced";
    return launch(c10d::OpType::COALESCED, op, opts.timeout, opts.asyncOp, [&] {
        CCL_CHECK_ARGUMENT(outputs.size() == inputs.size(), op, ": ", outputs.size(), " outputs for ", inputs.size(),
                           " inputs");
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            check_reduce_scatter_pair(outputs[i], inputs[i], opts.reduceOp, getSize(), op);
        }
        return OpTensors{inputs, outputs};
    }, [&](CCLWork& work) {
        for (std::size_t i = 0; i < inputs.size(); ++i) reduce_scatter_flat(work, op, outputs[i], inputs[i], opts.reduceOp);
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                               std::vector<std::vector<at::Tensor>>& inputs,
                                                               const c10d::ReduceScatterOptions& opts) {
    const char* op = "reduce_scatter";
    at::Tensor output, flat;  // flat: the input list, concatenated
    bool even = true;
    int64_t offset = 0;  // where this rank's part starts in flat
    return launch(c10d::OpType::REDUCE_SCATTER, op, opts.timeout, opts.asyncOp, [&] {
        output = single(outputs, op);
        check_dense(output, op, "output");
        CCL_CHECK_ARGUMENT(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), op,
                           ": expects a list of ", getSize(), " input tensors (one per rank)");
        const auto& ins = inputs[0];
        for (int r = 0; r < getSize(); ++r) {
            check_dense(ins[r], op, "input");
            check_same_dtype(ins[r], output, op);
            even = even && ins[r].numel() == ins[0].numel();
            if (r < getRank()) offset += ins[r].numel();
        }
        check_same_numel(ins[getRank()], output.numel(), op, "this rank's input tensor", "same as its output");
        check_reducible(output, opts.reduceOp, op);
        std::vector<at::Tensor> flats;
        for (const auto& i : ins) flats.push_back(i.reshape({-1}));
        flat = at::cat(flats);
        return OpTensors{ins, outputs};
    }, [&](CCLWork& work) {
        if (even) {
            reduce_scatter_flat(work, op, output, flat, opts.reduceOp);
            return;
        }
        // Outputs of different sizes per rank (the original allowed it; oneCCL's reduce_scatter does not): reduce
        // the whole list, keep this rank's part. It moves size x the data of the even case.
        reduce_into(work, op, flat, opts.reduceOp, -1);
        work.finish_steps().push_back([flat, output, offset]() mutable {
            output.copy_(flat.narrow(0, offset, output.numel()).view(output.sizes()));
        });
    });
}

// ---- all-to-all ---------------------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                              std::vector<int64_t>& output_split_sizes,
                                                              std::vector<int64_t>& input_split_sizes,
                                                              const c10d::AllToAllOptions& opts) {
    const char* op = "alltoall_base";
    std::vector<std::size_t> send_counts, recv_counts;
    return launch(c10d::OpType::ALLTOALL_BASE, op, opts.timeout, opts.asyncOp, [&] {
        check_dense(input, op, "input");
        check_dense(output, op, "output");
        check_same_dtype(input, output, op);
        (void)core_dtype(input.scalar_type(), op);
        const int64_t size = getSize();
        auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
            const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
            const int64_t row = rows == 0 ? 0 : t.numel() / rows;
            const int64_t scale = t.is_complex() ? 2 : 1;
            std::vector<std::size_t> c(static_cast<std::size_t>(size));
            if (splits.empty()) {
                CCL_CHECK_ARGUMENT(rows % size == 0, op, ": ", which, "'s first dimension (", rows,
                                   ") is not divisible by the group size ", size, "; pass split sizes");
                std::fill(c.begin(), c.end(), static_cast<std::size_t>(rows / size * row * scale));
            } else {
                CCL_CHECK_ARGUMENT(static_cast<int64_t>(splits.size()) == size, op, ": ", which, " split sizes have ",
                                   splits.size(), " entries, expected one per rank (", size, ")");
                for (auto s : splits) CCL_CHECK_ARGUMENT(s >= 0, op, ": negative ", which, " split size ", s);
                CCL_CHECK_ARGUMENT(sum_of(splits) == rows, op, ": ", which, " split sizes add up to ", sum_of(splits),
                                   ", but its first dimension is ", rows);
                for (int64_t r = 0; r < size; ++r) c[r] = static_cast<std::size_t>(splits[r] * row * scale);
            }
            return c;
        };
        send_counts = counts(input, input_split_sizes, "input");
        recv_counts = counts(output, output_split_sizes, "output");
        return OpTensors{{input}, {output}};
    }, [&](CCLWork& work) {
        Buffer in = input_buffer(input, op);
        Buffer out = output_buffer(output, op, work.finish_steps());
        work.add(translate_errors([&] {
            return work.engine().alltoallv(in.data(), send_counts, out.data(), recv_counts, in.dtype);
        }));
        work.keep_alive(in.tensor);
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions& opts) {
    const char* op = "alltoall";
    std::vector<std::size_t> send_counts, recv_counts;
    return launch(c10d::OpType::ALLTOALL, op, opts.timeout, opts.asyncOp, [&] {
        CCL_CHECK_ARGUMENT(static_cast<int>(inputs.size()) == getSize() && static_cast<int>(outputs.size()) == getSize(),
                           op, ": expects one input and one output tensor per rank (", getSize(), "), got ",
                           inputs.size(), " and ", outputs.size());
        for (int r = 0; r < getSize(); ++r) {
            check_dense(inputs[r], op, "input");
            check_dense(outputs[r], op, "output");
            check_same_dtype(inputs[0], inputs[r], op);
            check_same_dtype(inputs[0], outputs[r], op);
            const std::size_t scale = inputs[r].is_complex() ? 2 : 1;
            send_counts.push_back(static_cast<std::size_t>(inputs[r].numel()) * scale);
            recv_counts.push_back(static_cast<std::size_t>(outputs[r].numel()) * scale);
        }
        (void)core_dtype(inputs[0].scalar_type(), op);
        return OpTensors{inputs, outputs};
    }, [&](CCLWork& work) {
        std::vector<at::Tensor> flats;
        for (auto& i : inputs) flats.push_back(i.reshape({-1}));
        at::Tensor in_flat = at::cat(flats);
        int64_t total_out = 0;
        for (auto& o : outputs) total_out += o.numel();
        at::Tensor out_flat = at::empty({total_out}, outputs[0].options());
        const auto dtype = core_dtype(in_flat.scalar_type(), op);
        work.add(translate_errors([&] {
            return work.engine().alltoallv(in_flat.data_ptr(), send_counts, out_flat.data_ptr(), recv_counts, dtype);
        }));
        work.keep_alive(in_flat);
        work.finish_steps().push_back([out_flat, outs = outputs]() mutable {
            int64_t offset = 0;
            for (auto& o : outs) {
                o.copy_(out_flat.narrow(0, offset, o.numel()).view(o.sizes()));
                offset += o.numel();
            }
        });
    });
}

// ---- point to point -----------------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::send(std::vector<at::Tensor>& tensors, int dst_rank, int /*tag*/) {
    const char* op = "send";
    at::Tensor t;
    return launch(c10d::OpType::SEND, op, c10d::kUnsetTimeout, true, [&] {
        t = single(tensors, op);
        check_dense(t, op, "tensor");
        (void)core_dtype(t.scalar_type(), op);
        check_peer(dst_rank, getRank(), getSize(), op);
        return OpTensors{tensors, {}};
    }, [&](CCLWork& work) {
        Buffer buf = input_buffer(t, op);
        work.add(translate_errors([&] { return work.engine().send(buf.data(), buf.count, buf.dtype, dst_rank); }));
        work.keep_alive(buf.tensor);
        any_source_->sent_to(dst_rank);
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::recv(std::vector<at::Tensor>& tensors, int src_rank, int /*tag*/) {
    const char* op = "recv";
    at::Tensor t;
    return launch(c10d::OpType::RECV, op, c10d::kUnsetTimeout, true, [&] {
        t = single(tensors, op);
        check_dense(t, op, "tensor");
        (void)core_dtype(t.scalar_type(), op);
        check_peer(src_rank, getRank(), getSize(), op);
        return OpTensors{tensors, tensors};
    }, [&](CCLWork& work) {
        Buffer buf = output_buffer(t, op, work.finish_steps());
        work.add(translate_errors([&] { return work.engine().recv(buf.data(), buf.count, buf.dtype, src_rank); }));
        any_source_->received_from(src_rank);
        work.set_source_rank(src_rank);
    });
}

// The recv is issued once some peer's send to this rank is announced and unclaimed (see any_source.hpp), at the
// latest when the caller waits; until then it costs a store read per poll.
c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::recvAnysource(std::vector<at::Tensor>& tensors, int /*tag*/) {
    const char* op = "recv";
    at::Tensor t;
    return launch(c10d::OpType::RECVANYSOURCE, op, c10d::kUnsetTimeout, true, [&] {
        t = single(tensors, op);
        check_dense(t, op, "tensor");
        CCL_CHECK_ARGUMENT(getSize() > 1, "recv without src: a group of one rank has no peer to receive from");
        (void)core_dtype(t.scalar_type(), op);
        return OpTensors{tensors, tensors};
    }, [&](CCLWork& work) {
        Buffer buf = output_buffer(t, op, work.finish_steps());
        work.defer([ledger = any_source_, buf](CCLWork& w) -> std::optional<ccl_core::Request> {
            const auto src = ledger->claim_any();
            if (!src) return std::nullopt;
            w.set_source_rank(*src);
            return translate_errors([&] { return w.engine().recv(buf.data(), buf.count, buf.dtype, *src); });
        }, "recv without src");
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::barrier(const c10d::BarrierOptions& opts) {
    return launch(c10d::OpType::BARRIER, "barrier", opts.timeout, opts.asyncOp, [] { return OpTensors{}; },
                  [](CCLWork& work) { work.add(translate_errors([&] { return work.engine().barrier(); })); });
}

// ---- coalescing ---------------------------------------------------------------------------------------------

void ProcessGroupCCL::startCoalescing() {
    CCL_CHECK_ARGUMENT(!coalescing_, "startCoalescing: already coalescing");
    coalescing_ = true;
    coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::endCoalescing() {
    CCL_CHECK_ARGUMENT(coalescing_, "endCoalescing: startCoalescing was not called");
    coalescing_ = false;
    std::vector<at::Tensor> outputs;
    for (auto& w : coalesced_) for (auto& t : w->result()) outputs.push_back(t);
    return launch(c10d::OpType::COALESCED, "coalesced", c10d::kUnsetTimeout, true, [&] { return OpTensors{{}, outputs}; },
                  [&](CCLWork& work) {
        for (auto& part : coalesced_) work.absorb(*part);  // one Work over every part's requests and finish steps
        coalesced_.clear();
    });
}

}  // namespace ccl_torch
