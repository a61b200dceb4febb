// Coalescing: the works issued between startCoalescing and endCoalescing become one Work.
#include "process_group_ccl.hpp"
#include "torch_errors.hpp"

namespace ccl_torch {

void ProcessGroupCCL::startCoalescing() {
    CCL_CHECK_ARGUMENT(!coalescing_, "startCoalescing: already coalescing");
    coalescing_ = true;
    coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCCL::endCoalescing() {
    CCL_CHECK_ARGUMENT(coalescing_, "endCoalescing: startCoalescing was not called");
    coalescing_ = false;
    std::vector<at::Tensor> outputs;
    for (auto& w : coalesced_) {
        for (auto& t : w->result()) outputs.push_back(t);
    }
    return launch({c10d::OpType::COALESCED, CCL_TORCH_OP("coalesced"), c10d::kUnsetTimeout, true},
                  [&] { return Checked<NoPlan>{{}, outputs, {}}; },
                  [&](Issue& issue, NoPlan&) {
                      // one operation over every part's requests, finish steps and tensors
                      for (auto& part : coalesced_) {
                          issue.op.absorb(part->operation());
                          part->merged();
                      }
                      coalesced_.clear();
                  });
}

}  // namespace ccl_torch
