// Request: the handle every collective returns (request.hpp).
#include <ccl_core/errors.hpp>
#include <ccl_core/request.hpp>

namespace ccl_core {
namespace {

PendingOperation& operation_of(const std::shared_ptr<PendingOperation>& op, const char* call) {
    if (!op) throw InvalidArgument(std::string(call) + "() on an empty Request");
    return *op;
}

}  // namespace

bool Request::test() { return operation_of(op_, "test").test(); }

void Request::wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) {
    operation_of(op_, "wait").wait(timeout, every_50ms);
}

bool Request::completed() const { return op_ && op_->completed(); }

const std::string& Request::op_name() const {
    static const std::string empty;
    return op_ ? op_->op_name() : empty;
}

void Request::set_timeout(std::chrono::milliseconds timeout) { operation_of(op_, "set_timeout").set_timeout(timeout); }

void Request::move_in_background() {
    operation_of(op_, "move_in_background");
    if (!op_->completed()) progress_in_background(op_);
}

void Request::complete_in_background(Completion completion) {
    operation_of(op_, "complete_in_background");
    ccl_core::complete_in_background(op_, std::move(completion));
}

}  // namespace ccl_core
