#include "process_group_ccl.hpp"

#include "c10d_store.hpp"
#include "device_plugins.hpp"
#include "interrupts.hpp"
#include "torch_errors.hpp"

#include <ccl_core/threads.hpp>

#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <sstream>

#include <unistd.h>

namespace ccl_torch {
namespace {

// "ccl:<host>:<pid>:<nonce>": names this process's place in a group for reconfigure(); the nonce keeps two groups of
// one process (or a pid reused after a restart) apart.
std::string new_reconfigure_handle() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::random_device entropy;
    const uint64_t nonce = (static_cast<uint64_t>(entropy()) << 32) | entropy();
    std::ostringstream handle;
    handle << "ccl:" << host << ":" << ::getpid() << ":" << std::hex << nonce;
    return handle.str();
}

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
                                 std::chrono::milliseconds timeout, const std::string& name, bool enable_reconfigure)
    : c10d::Backend(rank, size),
      c10d_store_(store),
      name_(name),
      timeout_ms_(timeout.count()),
      options_(c10::make_intrusive<c10d::Backend::Options>("ccl", timeout)),
      verbose_(env_flag("ONECCL_BINDINGS_FOR_PYTORCH_ENV_VERBOSE")) {
    if (env_flag("ONECCL_BINDINGS_FOR_PYTORCH_ENV_WAIT_GDB")) {
        std::fprintf(stderr, "[oneccl_bindings_for_pytorch] rank %d waiting for a debugger: gdb -p %d, then "
                     "'set var ccl_torch_wait_for_gdb = 0' and 'continue'\n", rank, static_cast<int>(::getpid()));
        while (ccl_torch_wait_for_gdb) ::sleep(1);
    }
    CCL_CHECK_ARGUMENT(timeout.count() > 0, "ProcessGroupCCL: timeout must be positive, got ", timeout.count(), " ms");
    store_ = std::make_shared<C10dStore>(store);
    handle_ = new_reconfigure_handle();
    if (enable_reconfigure) {
        no_comm_why_ = "the group was made with enable_reconfigure=True and has no members until reconfigure() "
                       "(torch.distributed.distributed_c10d._reconfigure) names them";
        return;
    }
    ccl_core::CommunicatorOptions options;
    options.timeout = timeout;
    options.name = name;
    ccl_core::set_compute_threads(at::get_num_threads());  // what torch computes with: large messages use as many
    adopt(translate_errors([&] { return ccl_core::Communicator::create(store_, rank, size, options); }), rank, size);
}

ProcessGroupCCL::~ProcessGroupCCL() = default;

void ProcessGroupCCL::adopt(std::shared_ptr<ccl_core::Communicator> comm, int rank, int size) {
    // before an abort on a failure, torch's abort hooks (the flight recorder's dump) see the group as it was
    comm->on_abort([hooks = hooks_](ccl_core::AbortCause, const std::string&) { hooks->run_abort_hooks(); });
    // a timeout's (or a disagreement's) error says where the other ranks are
    auto board = StatusBoard::create(c10d_store_, name_, rank, size);
    comm->explain_failures_with([weak = std::weak_ptr<StatusBoard>(board)](const std::string&) {
        auto b = weak.lock();
        return b ? b->explain() : std::string();
    });
    watch_board(board);
    std::atomic_store(&board_, board);
    std::lock_guard<std::mutex> lock(comm_mutex_);
    comm_ = std::move(comm);
#ifdef C10D_BACKEND_HAS_RECONFIGURE
    rank_ = rank;  // reconfigure gives new ones (torch 2.14 made them the backend's to change)
    size_ = size;
#endif
    seq_ = 0;
    any_source_ = std::make_shared<AnySourceLedger>(c10d_store_, rank, size);
    std::lock_guard<std::mutex> devices(device_mutex_);
    device_collectives_.clear();  // made again, for the new members, at their device's next op
}

std::shared_ptr<ccl_core::Communicator> ProcessGroupCCL::communicator(const char* op) const {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (!comm_) C10_THROW_ERROR(DistBackendError, std::string("ccl: ") + op + " on group '" + name_ + "': " + no_comm_why_);
    return comm_;
}

#if CCL_TORCH_HAS_SPLIT
c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupCCL::getBackendOptions() {
    options_->timeout = std::chrono::milliseconds(timeout_ms_.load());
    return options_;
}

void ProcessGroupCCL::setTimeout(std::chrono::milliseconds timeout) {
    CCL_CHECK_ARGUMENT(timeout.count() > 0, "set_timeout: the timeout must be positive, got ", timeout.count(), " ms");
    timeout_ms_ = timeout.count();
}
#endif

c10d::ErrorType ProcessGroupCCL::getError() {
    std::shared_ptr<ccl_core::Communicator> comm;
    {
        std::lock_guard<std::mutex> lock(comm_mutex_);
        comm = comm_;
    }
    if (!comm) return c10d::ErrorType::SUCCESS;
    switch (comm->abort_cause()) {
        case ccl_core::AbortCause::none: return c10d::ErrorType::SUCCESS;
        case ccl_core::AbortCause::timeout: return c10d::ErrorType::TIMEOUT;
        case ccl_core::AbortCause::peer_died: return c10d::ErrorType::REMOTE_ERROR;
        case ccl_core::AbortCause::failed:
        case ccl_core::AbortCause::by_user: return c10d::ErrorType::COMM_ERROR;
    }
    return c10d::ErrorType::COMM_ERROR;
}

void ProcessGroupCCL::abort() {
    std::shared_ptr<ccl_core::Communicator> comm;
    {
        std::lock_guard<std::mutex> lock(comm_mutex_);
        comm = comm_;
    }
    if (comm) comm->abort("abort() was called on group '" + name_ + "'");
}

void ProcessGroupCCL::shutdown() {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    comm_.reset();  // destroyed with the last op that still holds it
    no_comm_why_ = "the group was shut down";
}

#if CCL_TORCH_MINOR >= 15
bool ProcessGroupCCL::isInitialized() {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    return comm_ != nullptr;
}
#endif

#ifdef C10D_BACKEND_HAS_HOOKS
void ProcessGroupCCL::registerAbortHook(int64_t hook_id, c10d::AbortHook hook) {
    hooks_->add_abort_hook(hook_id, std::move(hook));
}
void ProcessGroupCCL::unregisterAbortHook(int64_t hook_id) { hooks_->remove_abort_hook(hook_id); }
#endif

#if CCL_TORCH_MINOR >= 15
void ProcessGroupCCL::registerCompletionHook(int64_t hook_id, c10d::CompletionHook hook) {
    hooks_->add_completion_hook(hook_id, [hook = std::move(hook)](const Completion& done) {
        c10d::CompletionHookArgs args;
        args.completionKey = done.key;
        args.duration_ms = done.duration_ms;
        hook(args);
    });
}
void ProcessGroupCCL::unregisterCompletionHook(int64_t hook_id) { hooks_->remove_completion_hook(hook_id); }
#endif

// Every rank reaches a device's first op in the same op, so plugin collectives are made collectively.
std::shared_ptr<ccl_core::Collectives> ProcessGroupCCL::collectives_for(const char* op, const std::vector<at::Tensor>& inputs,
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
    auto comm = communicator(op);
    if (!first || first->device().is_cpu()) return comm;
    const c10::Device device = first->device();
    auto plugin = device_plugin(device.type());
    CCL_CHECK_ARGUMENT(plugin, op, ": tensor is on ", device, "; this ccl backend serves CPU tensors",
                      device.type() == c10::DeviceType::XPU ? " (install ccl-xpu for XPU tensors)" : "");
    translate_errors([&] { plugin->check_usable(device); });
    std::lock_guard<std::mutex> lock(device_mutex_);
    auto& collectives = device_collectives_[device.type()];
    if (!collectives) {
        const std::string type_name = c10::DeviceTypeName(device.type(), true);
        ccl_core::CommunicatorOptions options = comm->options();
        options.name += "/" + type_name;
        auto store = std::make_shared<ccl_core::PrefixStore>("ccl_torch/device/" + type_name, store_);
        collectives = translate_errors([&] { return plugin->create(store, getRank(), getSize(), options, device); });
    }
    return collectives;
}

c10::intrusive_ptr<CCLWork> ProcessGroupCCL::make_work(const OpSpec& spec, const std::vector<at::Tensor>& inputs,
                                                       std::vector<at::Tensor> outputs) {
    const auto timeout = spec.timeout == c10d::kUnsetTimeout || spec.timeout.count() <= 0
                             ? std::chrono::milliseconds(timeout_ms_.load())
                             : spec.timeout;
    auto op = std::make_shared<WorkOperation>(spec.op.name, getRank(), timeout);
    for (const auto& t : outputs) op->keep_alive(t);  // oneCCL may write into them after the caller dropped them
    auto work = c10::make_intrusive<CCLWork>(getRank(), spec.type, spec.op.title, inputs, std::move(outputs), op);
    const uint64_t seq = seq_ + 1;
    work->set_sequence_number(seq);
    const bool timed = timing_.load(std::memory_order_relaxed);
    if (timed) work->time_it();
    auto board = std::atomic_load(&board_);
    if (board) {
        StatusBoard::Moves moves;
        if (!inputs.empty() && inputs[0].defined()) {
            moves = {inputs[0].scalar_type(), inputs[0].numel(), static_cast<int>(inputs.size())};
        }
        board->issued(seq, spec.op.name, moves);
    }
    // once complete: the board, and torch's completion hooks (the flight recorder retires the op's entry)
    op->on_success([hooks = hooks_, board, seq, key = work->completion_key(), timed,
                    weak = std::weak_ptr<WorkOperation>(op)] {
        if (board) board->completed(seq);
        if (!hooks->any_completion_hook()) return;
        std::optional<float> ms;
        if (auto done = weak.lock(); done && timed) ms = std::chrono::duration<float, std::milli>(done->took()).count();
        hooks->run_completion_hooks({key, ms});
    });
    if (verbose_) {
        std::ostringstream line;
        line << "rank " << getRank() << "/" << getSize() << " " << spec.op.name << " [" << tensor_list(inputs) << "]";
        std::fprintf(stderr, "[oneccl_bindings_for_pytorch] %s issued\n", line.str().c_str());
        work->set_verbose(line.str());
    }
    if (coalescing_) coalesced_.push_back(work);
    ++seq_;
    return work;
}

void ProcessGroupCCL::abort_if_interrupted(const OpSpec& spec, ccl_core::Collectives& on) {
    bool interrupted = false;
    try {
        check_for_interrupt(interrupted);
    } catch (...) {
        on.abort(std::string(spec.op.name) + " was interrupted while being issued");
        throw;
    }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::barrier(const c10d::BarrierOptions& opts) {
    return launch({c10d::OpType::BARRIER, CCL_TORCH_OP("barrier"), opts.timeout, opts.asyncOp},
                  [] { return Checked<NoPlan>{}; },
                  [](Issue& issue, NoPlan&) { issue.op.add(translate_errors([&] { return issue.on.barrier(); })); });
}

}  // namespace ccl_torch
