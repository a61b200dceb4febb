// ccl-core's own environment variables: read with one set of rules, so that every setting refuses the same bad input.
#pragma once

#include <ccl_core/errors.hpp>

#include <cstddef>
#include <cstdlib>
#include <string>

namespace ccl_core::detail {

// The variable's value, or `fallback` when it is unset or empty.
inline std::string env_or(const char* name, const std::string& fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : fallback;
}

// A whole number of bytes, in decimal; anything else (a sign, a suffix, nothing) is refused by the variable's name.
inline std::size_t parse_bytes(const std::string& name, const std::string& v) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end || v[0] == '-' || v[0] == '+' || v[0] == ' ') {
        throw InvalidArgument(name + "=" + v + " is not a number of bytes");
    }
    return static_cast<std::size_t>(n);
}

// The variable as a number of bytes, or `fallback` when it is unset or empty.
inline std::size_t env_bytes(const char* name, std::size_t fallback) {
    const char* v = std::getenv(name);
    return v && *v ? parse_bytes(name, v) : fallback;
}

}  // namespace ccl_core::detail
