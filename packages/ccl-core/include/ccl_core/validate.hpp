// The checks every collective makes before anything is sent, one set for host and device communicators, so that a
// mistake gets the same message wherever it is made: each names the op and the bad value (InvalidArgument), or the
// combination that cannot run (Unsupported). A rank that fails them has issued nothing, and its group stays usable.
#pragma once

#include <ccl_core/op_args.hpp>

#include <cstddef>
#include <functional>
#include <vector>

namespace ccl_core {

// Checks one buffer of an op beyond "not null while it holds elements": a device communicator's, that it is memory
// of its SYCL context. `name` is the buffer's ("send", "recv", "buffer").
using BufferCheck = std::function<void(const char* op, const char* name, const void* p, std::size_t count)>;

// Every check of `a` on rank `rank` of a group of `size`: ranks and peers in range, counts one per rank and agreeing
// with this rank's buffers, buffers present for what they must hold, reduce ops the dtype allows.
void validate(const OpArgs& a, int rank, int size, const BufferCheck& check_buffer = {});

// The single checks, for callers that describe an op their own way.
void check_rank(const char* op, const char* what, int r, int size);
void check_counts(const char* op, const char* name, const std::vector<std::size_t>& counts, int size);
void check_buffer(const char* op, const char* name, const void* p, std::size_t count);

}  // namespace ccl_core
