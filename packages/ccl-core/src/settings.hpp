// ccl-core's own environment settings, declared once (settings.cpp): name, kind, default and meaning. Every read of
// one goes through here, so each refuses bad input the same way wherever it is read, and the documentation's table is
// checked against this one (ccl_core.settings(), tests/docs). What ccl-core sets for oneCCL is in oneccl/runtime.hpp.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ccl_core::detail {

struct Setting {
    const char* name;
    const char* kind;           // "switch" (0 or 1), "bytes", "count" (a whole number), or the values it takes
    const char* default_value;  // as the documentation states it; computed ones in words
    const char* meaning;
};

const std::vector<Setting>& settings();

// The variable's value, "" when unset or empty. Only declared settings may be read (std::logic_error otherwise).
std::string setting_text(const char* name);
// A switch: the declared default when unset; InvalidArgument naming the setting for anything but 0 and 1.
bool setting_on(const char* name);
// A whole number of bytes in decimal, `fallback` when unset; anything else (a sign, a suffix) is refused by name.
std::size_t setting_bytes(const char* name, std::size_t fallback);
// Reads every switch and byte count once, so that a bad value fails on every rank that has it when oneCCL starts,
// before any communicator waits for its peers (a rank that failed later would leave the others waiting).
void check_settings();
// `value` as a number of bytes, refused under `what` (a setting a peer handed over is checked the same way).
std::size_t parse_bytes(const std::string& what, const std::string& value);

}  // namespace ccl_core::detail
