// Typed errors of ccl-core. Every failure a user can cause or meet is one of these, with a message that
// names the operation and what to change; the Python face maps each to its own exception class.
#pragma once

#include <stdexcept>
#include <string>

namespace ccl_core {

// Why a communicator was aborted (Communicator::abort_cause; torch's getError).
enum class AbortCause {
    none,       // not aborted
    timeout,    // an operation ran out of time
    peer_died,  // a rank of the group on this host died
    failed,     // an operation failed (oneCCL's error, ranks that called different ops)
    by_user,    // abort() was called, or a wait was interrupted
};
const char* abort_cause_name(AbortCause cause);

// Base of all ccl-core errors.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The caller passed something wrong: sizes, counts, ranks, roots, buffers.
class InvalidArgument : public Error {
public:
    using Error::Error;
};

// A dtype / reduce op / feature that this build or oneCCL cannot do.
class Unsupported : public Error {
public:
    using Error::Error;
};

// A bootstrap or an operation did not finish within its timeout (a peer died or never came).
class Timeout : public Error {
public:
    using Error::Error;
};

// The communicator is unusable: an earlier operation timed out or failed, or it was aborted.
class CommunicatorAborted : public Error {
public:
    using Error::Error;
};

// oneCCL itself reported an error.
class BackendError : public Error {
public:
    using Error::Error;
};

}  // namespace ccl_core
