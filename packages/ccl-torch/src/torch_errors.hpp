// ccl-core's typed errors as the errors torch users catch, and the ccl backend's own argument errors.
//
// Argument errors are raised as oneccl_bindings_for_pytorch.ArgumentError, a subclass of both ValueError (what
// torch's own checks raise) and RuntimeError (what the original bindings and gloo raise), so code written for
// either catches them. Wrong dtypes raise its subclass DTypeError, which is a TypeError as well.
// Unsupported ops stay NotImplementedError (itself a RuntimeError); timeouts, aborted groups and oneCCL failures
// are torch.distributed.DistBackendError.
#pragma once

#include <ccl_core/errors.hpp>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <string>
#include <utility>

namespace ccl_torch {

[[noreturn]] void throw_argument_error(const std::string& message);
[[noreturn]] void throw_dtype_error(const std::string& message);

// Creates ArgumentError and DTypeError in `module` (the extension's _C); called once at import.
void define_python_errors(void* module);

template <class F>
decltype(auto) translate_errors(F&& f) {
    try {
        return std::forward<F>(f)();
    } catch (const ccl_core::InvalidArgument& e) {
        throw_argument_error(std::string("ccl: ") + e.what());
    } catch (const ccl_core::Unsupported& e) {
        TORCH_CHECK_NOT_IMPLEMENTED(false, "ccl: ", e.what());
    } catch (const ccl_core::Error& e) {
        C10_THROW_ERROR(DistBackendError, std::string("ccl: ") + e.what());
    }
}

}  // namespace ccl_torch

#define CCL_CHECK_ARGUMENT(cond, ...)                                                   \
    do {                                                                                \
        if (C10_UNLIKELY(!(cond))) ::ccl_torch::throw_argument_error(::c10::str(__VA_ARGS__)); \
    } while (0)

#define CCL_CHECK_DTYPE(cond, ...)                                                      \
    do {                                                                                \
        if (C10_UNLIKELY(!(cond))) ::ccl_torch::throw_dtype_error(::c10::str(__VA_ARGS__)); \
    } while (0)
