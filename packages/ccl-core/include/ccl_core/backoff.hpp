// How every poller gives the cores away while an operation is not done: the caller's wait, the progress thread, a
// torch recv waiting for a sender. One schedule, so that waiting costs the same wherever it happens:
// - spin first: small messages complete in microseconds;
// - then yield: ranks that keep polling look busy, and the load balancer keeps them on cores of their own (sleeping
//   is worse while a transfer runs: the scheduler tends to wake a sleeper on its waker's core);
// - then nap: naps of 20 us for as long as the wait asks (ranks that outnumber the cores), then doubling up to a
//   cap that grows with the wait's age, so that a transfer in progress loses little per step while waiting for a
//   late peer costs almost no CPU (docs/performance.md, "Waiting").
#pragma once

#include <chrono>

namespace ccl_core {

// Until when a wait spins, then yields, then takes only the shortest naps (each counted from its start).
struct BackoffPhases {
    std::chrono::microseconds spin{0};
    std::chrono::microseconds yield{0};
    std::chrono::microseconds short_naps{0};
    // Until then naps stay under transfer_nap (when set): a transfer between hosts moves only while polled.
    std::chrono::microseconds transfer{0};
    std::chrono::microseconds transfer_nap{0};
};

class Backoff {
public:
    using Clock = std::chrono::steady_clock;
    using Phases = BackoffPhases;
    enum class Step { spin, yield, nap };

    explicit Backoff(Phases phases = {}, Clock::time_point start = Clock::now());

    // What the wait should do before its next poll at `now`.
    Step step(Clock::time_point now) const;
    // The nap to take now; each call doubles the next one, up to nap_cap(age).
    std::chrono::microseconds next_nap(Clock::time_point now);
    // Carries out step(now): returns at once (spin), after a yield, or after next_nap(now).
    void pause(Clock::time_point now);
    // Progress was seen (a new operation, one completed): back to short naps, as if the wait began at `now`.
    void restart(Clock::time_point now);
    // The longest nap for a wait that has lasted `age`: 1 ms in its first 20 ms, 5 ms to 0.2 s, 25 ms to 2 s,
    // then 200 ms (a peer that late loses at most a tenth more). A sleep on something a peer wakes (the
    // shared-memory path's futex) uses it as its limit.
    static std::chrono::microseconds nap_cap(Clock::duration age);

private:
    Phases phases_;
    Clock::time_point start_;
    std::chrono::microseconds nap_;
};

}  // namespace ccl_core
