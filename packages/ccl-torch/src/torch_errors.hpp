// ccl-core's typed errors as the c10 errors torch users catch: ValueError, NotImplementedError,
// torch.distributed.DistBackendError (timeouts, aborted groups, oneCCL failures).
#pragma once

#include <ccl_core/errors.hpp>

#include <c10/util/Exception.h>

#include <utility>

namespace ccl_torch {

template <class F>
decltype(auto) translate_errors(F&& f) {
    try {
        return std::forward<F>(f)();
    } catch (const ccl_core::InvalidArgument& e) {
        TORCH_CHECK_VALUE(false, "ccl: ", e.what());
    } catch (const ccl_core::Unsupported& e) {
        TORCH_CHECK_NOT_IMPLEMENTED(false, "ccl: ", e.what());
    } catch (const ccl_core::Error& e) {
        C10_THROW_ERROR(DistBackendError, std::string("ccl: ") + e.what());
    }
}

}  // namespace ccl_torch
