#include "process_group_ccl.hpp"

#include "c10d_store.hpp"
#include "device_plugins.hpp"
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

}  // namespace

ProcessGroupCCL::ProcessGroupCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                 std::chrono::milliseconds timeout, const std::string& name)
    : c10d::Backend(rank, size), timeout_(timeout), verbose_(env_flag("ONECCL_BINDINGS_FOR_PYTORCH_ENV_VERBOSE")) {
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

ProcessGroupCCL::~ProcessGroupCCL() = default;

// Every rank reaches a device's first op in the same op, so plugin collectives are made collectively.
ccl_core::Collectives& ProcessGroupCCL::collectives_for(const char* op, const std::vector<at::Tensor>& inputs,
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
    auto& collectives = device_collectives_[device.type()];
    if (!collectives) {
        const std::string type_name = c10::DeviceTypeName(device.type(), true);
        ccl_core::CommunicatorOptions options = comm_->options();
        options.name += "/" + type_name;
        auto store = std::make_shared<ccl_core::PrefixStore>("ccl_torch/device/" + type_name, store_);
        collectives = translate_errors([&] { return plugin->create(store, getRank(), getSize(), options, device); });
    }
    return *collectives;
}

c10::intrusive_ptr<CCLWork> ProcessGroupCCL::make_work(const OpSpec& spec, const std::vector<at::Tensor>& inputs,
                                                       std::vector<at::Tensor> outputs) {
    // Profiler name as in the original bindings: "oneccl_bindings_for_pytorch::allreduce".
    static thread_local std::string title;
    title = std::string("oneccl_bindings_for_pytorch::") + spec.name;
    const auto timeout = spec.timeout == c10d::kUnsetTimeout || spec.timeout.count() <= 0 ? timeout_ : spec.timeout;
    auto op = std::make_shared<WorkOperation>(spec.name, getRank(), timeout);
    for (const auto& t : outputs) op->keep_alive(t);  // oneCCL may write into them after the caller dropped them
    auto work = c10::make_intrusive<CCLWork>(getRank(), spec.type, title.c_str(), inputs, std::move(outputs), op);
    if (verbose_) {
        std::ostringstream line;
        line << "rank " << getRank() << "/" << getSize() << " " << spec.name << " [" << tensor_list(inputs) << "]";
        std::fprintf(stderr, "[oneccl_bindings_for_pytorch] %s issued\n", line.str().c_str());
        work->set_verbose(line.str());
    }
    if (coalescing_) coalesced_.push_back(work);
    ++seq_;
    return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::barrier(const c10d::BarrierOptions& opts) {
    return launch({c10d::OpType::BARRIER, "barrier", opts.timeout, opts.asyncOp},
                  [] { return Checked<NoPlan>{}; },
                  [](Issue& issue, NoPlan&) { issue.op.add(translate_errors([&] { return issue.on.barrier(); })); });
}

}  // namespace ccl_torch
