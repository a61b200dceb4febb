// Store values that are text: what ranks tell each other at creation (settings, names, reports).
#pragma once

#include <ccl_core/store.hpp>

#include <string>

namespace ccl_core::detail {

inline Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }
inline std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

}  // namespace ccl_core::detail
