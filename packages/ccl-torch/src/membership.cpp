// Groups made from groups (split, merge, shrink), and a group rebuilt in place with new members (reconfigure): what
// torch's split_group, DeviceMesh, shrink_group and fault-tolerant training ask of a backend.
#include "c10d_store.hpp"
#include "process_group_ccl.hpp"
#include "torch_errors.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <set>

namespace ccl_torch {

#if CCL_TORCH_HAS_SPLIT
c10::intrusive_ptr<ProcessGroupCCL> ProcessGroupCCL::make_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                                int size,
                                                                const c10::intrusive_ptr<c10d::Backend::Options>& opts,
                                                                const std::string& suffix) const {
    auto timeout = std::chrono::milliseconds(timeout_ms_.load());
    if (opts && opts->timeout.count() > 0) timeout = opts->timeout;
    const std::string name = opts && !opts->group_name.empty() ? opts->group_name : name_ + suffix;
    return c10::make_intrusive<ProcessGroupCCL>(store, rank, size, timeout, name);
}

// `ranks` are ranks of this group, the members of the new one; torch has namespaced `store`. torch asks every rank of
// this group, members or not (split_group with lists that leave a rank out): a non-member gets no backend.
c10::intrusive_ptr<c10d::Backend> ProcessGroupCCL::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                         const std::vector<int>& ranks,
                                                         const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
    const char* op = "split";
    CCL_CHECK_ARGUMENT(!ranks.empty(), op, ": the list of ranks of the new group is empty");
    std::set<int> seen;
    for (int r : ranks) {
        CCL_CHECK_ARGUMENT(r >= 0 && r < getSize(), op, ": rank ", r, " is out of range for a group of ", getSize(),
                           " rank(s) (0..", getSize() - 1, ")");
        CCL_CHECK_ARGUMENT(seen.insert(r).second, op, ": rank ", r, " is listed twice");
    }
    std::vector<int> members(ranks);
    std::sort(members.begin(), members.end());
    const auto me = std::find(members.begin(), members.end(), getRank());
    if (me == members.end()) return {};
    return make_group(store, static_cast<int>(me - members.begin()), static_cast<int>(members.size()), opts, "/split");
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupCCL::merge(const c10::intrusive_ptr<c10d::Store>& store,
                                                         const c10::intrusive_ptr<c10d::Backend::Options>& opts,
                                                         const int& rank, const int& size) {
    CCL_CHECK_ARGUMENT(size > 0 && rank >= 0 && rank < size, "merge: rank ", rank, " is out of range for a group of ",
                       size, " rank(s)");
    return make_group(store, rank, size, opts, "/merged");
}
#endif

#if CCL_TORCH_HAS_SHRINK
// Only the survivors call it, each with the same list; the new group meets through this group's store (torch's
// rendezvous store outlives any rank under torchrun).
c10::intrusive_ptr<c10d::Backend> ProcessGroupCCL::shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
                                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts_override) {
    const char* op = "shrink";
    std::set<int64_t> excluded;
    for (int64_t r : ranks_to_exclude) {
        CCL_CHECK_ARGUMENT(r >= 0 && r < getSize(), op, ": rank ", r, " is out of range for a group of ", getSize(),
                           " rank(s)");
        CCL_CHECK_ARGUMENT(excluded.insert(r).second, op, ": rank ", r, " is listed twice");
    }
    CCL_CHECK_ARGUMENT(!excluded.count(getRank()), op, ": this rank (", getRank(), ") is among the ranks to exclude; "
                       "only the ranks that stay call shrink");
    CCL_CHECK_ARGUMENT(static_cast<int>(excluded.size()) < getSize(), op, ": every rank would be excluded");
    constexpr int kShrinkAbort = 1;  // torch's SHRINK_ABORT: end this group's pending ops first
    if (shrink_flags & kShrinkAbort) abort();
    int new_rank = 0;
    for (int r = 0; r < getRank(); ++r) new_rank += excluded.count(r) ? 0 : 1;
    const int index = shrinks_++;
    auto store = c10::make_intrusive<c10d::PrefixStore>("ccl_torch/shrink/" + std::to_string(index), c10d_store_);
    return make_group(store, new_rank, getSize() - static_cast<int>(excluded.size()), opts_override,
                      "/shrunk" + std::to_string(index));
}
#endif

#ifdef C10D_BACKEND_HAS_RECONFIGURE
namespace {

// The members in rank order: a list as given, a set sorted (the same order on every rank). Each handle must be one
// that get_reconfigure_handle() could have made.
std::vector<std::string> members_of(const c10d::ReconfigureOptions& opts) {
    std::vector<std::string> members;
    if (const auto* list = std::get_if<std::vector<c10d::ReconfigureHandle>>(&opts.handles)) {
        members = *list;
    } else {
        const auto& set = std::get<std::unordered_set<c10d::ReconfigureHandle>>(opts.handles);
        members.assign(set.begin(), set.end());
        std::sort(members.begin(), members.end());
    }
    CCL_CHECK_ARGUMENT(!members.empty(), "reconfigure: no handles given; pass one per member, as "
                       "get_reconfigure_handle() returned it on each");
    std::set<std::string> seen;
    for (const auto& h : members) {
        const bool printable = std::all_of(h.begin(), h.end(), [](char c) { return c > ' ' && c < 127; });
        CCL_CHECK_ARGUMENT(h.rfind("ccl:", 0) == 0 && h.size() < 512 && printable, "reconfigure: '", h.substr(0, 80),
                           "' is not a handle of the ccl backend (get_reconfigure_handle() returns 'ccl:<host>:<pid>:...')");
        CCL_CHECK_ARGUMENT(seen.insert(h).second, "reconfigure: handle '", h, "' is given twice");
    }
    return members;
}

}  // namespace

// Collective over the members. The old communicator is aborted first: its peers may be gone, and destroying a
// healthy one waits for all of them.
c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::reconfigure(const c10d::ReconfigureOptions& opts) {
    const std::vector<std::string> members = members_of(opts);
    const auto me = std::find(members.begin(), members.end(), handle_);
    CCL_CHECK_ARGUMENT(me != members.end(), "reconfigure: this rank's handle (", handle_, ") is not among the ",
                       members.size(), " handle(s) given");
    CCL_CHECK_ARGUMENT(std::find(reconfigured_with_.begin(), reconfigured_with_.end(), opts.uuid) ==
                           reconfigured_with_.end(),
                       "reconfigure: uuid ", opts.uuid, " was used before on this group; pass a fresh one each time");
    reconfigured_with_.push_back(opts.uuid);
    const int rank = static_cast<int>(me - members.begin());
    const int size = static_cast<int>(members.size());
    const auto timeout = opts.timeout.value_or(std::chrono::milliseconds(timeout_ms_.load()));
    CCL_CHECK_ARGUMENT(timeout.count() > 0, "reconfigure: the timeout must be positive");

    std::shared_ptr<ccl_core::Communicator> old;
    {
        std::lock_guard<std::mutex> lock(comm_mutex_);
        old.swap(comm_);
        no_comm_why_ = "reconfigure(uuid " + std::to_string(opts.uuid) + ") did not complete";
    }
    if (old && !old->aborted()) old->abort("replaced by reconfigure(uuid " + std::to_string(opts.uuid) + ")");
    old.reset();

    auto store = std::make_shared<ccl_core::PrefixStore>("ccl_torch/reconfigure/" + std::to_string(opts.uuid), store_);
    // every member must have been given the same members: rank 0's list is the reference
    std::string joined;
    for (const auto& h : members) joined += h + "\n";
    if (rank == 0) store->set("members", ccl_core::Bytes(joined.begin(), joined.end()));
    const ccl_core::Bytes agreed = translate_errors([&] { return store->get("members", timeout); });
    CCL_CHECK_ARGUMENT(std::string(agreed.begin(), agreed.end()) == joined, "reconfigure(uuid ", opts.uuid,
                       "): this rank was given other members than rank 0 (", members.size(), " handle(s) here); every "
                       "member must pass the same handles");

    ccl_core::CommunicatorOptions options;
    options.timeout = timeout;
    options.name = name_;
    adopt(translate_errors([&] { return ccl_core::Communicator::create(store, rank, size, options); }), rank, size);
    options_->timeout = std::chrono::milliseconds(timeout_ms_.load());

    // what torch returns to the caller: a work already complete
    auto op = std::make_shared<WorkOperation>("reconfigure", rank, timeout);
    auto work = c10::make_intrusive<CCLWork>(rank, c10d::OpType::UNKNOWN, "oneccl_bindings_for_pytorch::reconfigure",
                                             std::vector<at::Tensor>{}, std::vector<at::Tensor>{}, op);
    work->wait();
    return work;
}
#endif

}  // namespace ccl_torch
