// Request: the handle every collective returns (request.hpp).
#include <ccl_core/errors.hpp>
#include <ccl_core/request.hpp>

#include "progress_thread.hpp"

namespace ccl_core {

bool Request::test() {
    if (!op_) throw InvalidArgument("test() on an empty Request");
    return op_->test();
}

void Request::wait(std::optional<std::chrono::milliseconds> timeout, const std::function<void()>& every_50ms) {
    if (!op_) throw InvalidArgument("wait() on an empty Request");
    op_->wait(timeout, every_50ms);
}

bool Request::completed() const { return op_ && op_->completed(); }

void Request::expire(std::chrono::milliseconds waited) {
    if (!op_) throw InvalidArgument("expire() on an empty Request");
    if (op_->test()) return;
    op_->expire(waited);
}

void progress_in_background(const std::shared_ptr<PendingOperation>& op) {
    if (auto* progress = detail::ProgressThread::instance()) progress->watch(op);
}

void Request::move_in_background() {
    if (!op_) throw InvalidArgument("move_in_background() on an empty Request");
    op_->move_in_background();
}

const std::string& Request::op_name() const {
    static const std::string empty;
    return op_ ? op_->op_name() : empty;
}

}  // namespace ccl_core
