// How a store's get waits for a key a peer has yet to set: naps from 0.2 ms doubling to 20 ms, so a key is seen within
// 20 ms of being set and a store polled over a socket is not flooded; a connection to the server is retried every
// 20 ms. Both are Backoff schedules (ccl_core/backoff.hpp), as every wait is.
#pragma once

#include <ccl_core/backoff.hpp>

#include <chrono>

namespace ccl_core::detail {

inline const BackoffPhases kStorePolls =
    BackoffPhases::naps(std::chrono::microseconds(200), std::chrono::milliseconds(20));
inline const BackoffPhases kConnectRetry = BackoffPhases::naps(std::chrono::milliseconds(20), std::chrono::milliseconds(20));

}  // namespace ccl_core::detail
