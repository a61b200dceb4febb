// Element-wise steps that oneCCL lacks on CPU and ccl-core runs itself after an operation completes.
#pragma once

#include <ccl_core/types.hpp>

#include <cstddef>

namespace ccl_core::detail {

// buffer[i] /= divisor for a floating dtype (avg = sum / group size).
void divide_in_place(void* buffer, std::size_t count, DType dtype, double divisor);

}  // namespace ccl_core::detail
