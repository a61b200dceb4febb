// How every poller gives the cores away while what it waits for is not there: the caller's wait on an op, the progress
// thread, a store's get, a torch recv waiting for a sender. Backoff::pause is the one place that decides between
// spinning, yielding and sleeping, so that waiting costs the same wherever it happens:
// - spin first: small messages complete in microseconds;
// - then yield: ranks that keep polling look busy, and the load balancer keeps them on cores of their own (sleeping
//   is worse while a transfer runs: the scheduler tends to wake a sleeper on its waker's core);
// - then nap: naps of 20 us for as long as the wait asks (ranks that outnumber the cores), then doubling up to a
//   cap that grows with the wait's age, so that a transfer in progress loses little per step while waiting for a
//   late peer costs almost no CPU (docs/performance.md, "Waiting").
// A nap is a plain sleep unless the waiter has something a peer wakes it from (the shared-memory path's futex), or
// sleeps its own way (the progress thread, on its condition variable).
#pragma once

#include <chrono>
#include <functional>
#include <optional>

namespace ccl_core {

// Until when a wait spins, then yields, then takes only the shortest naps (each counted from its start).
struct BackoffPhases {
    std::chrono::microseconds spin{0};
    std::chrono::microseconds yield{0};
    std::chrono::microseconds short_naps{0};
    // Until then naps stay under transfer_nap (when set): a transfer between hosts moves only while polled.
    std::chrono::microseconds transfer{0};
    std::chrono::microseconds transfer_nap{0};
    // The first nap, and the longest (0: the cap grows with the wait's age, nap_cap). A store polled over a socket
    // keeps its naps short and fixed in range; a retry at a fixed pace sets both alike.
    std::chrono::microseconds first_nap{20};
    std::chrono::microseconds max_nap{0};

    // Naps only: from `first`, doubling up to `max` (first == max: a fixed pace).
    static BackoffPhases naps(std::chrono::microseconds first, std::chrono::microseconds max) {
        BackoffPhases p;
        p.first_nap = first;
        p.max_nap = max;
        return p;
    }
};

// What a pause may do beyond the schedule; every field is optional.
struct BackoffSleep {
    // Sleeps until a peer may have moved what is waited for, at most the duration given; false when there is
    // nothing to sleep on (a plain nap follows). Sleeps of this kind last up to nap_cap(age): the peer wakes it.
    std::function<bool(std::chrono::microseconds)> on_peers;
    // How to take a plain nap (default: sleep the thread).
    std::function<void(std::chrono::microseconds)> plain;
    // No nap outlasts this point (the op's deadline: a timeout is raised on time).
    std::optional<std::chrono::steady_clock::time_point> until;
    // No nap is longer than this (the shortest nap any op being polled asks for; 0: no bound).
    std::chrono::microseconds bound{0};
    // A peer runs on this core and cannot progress while this thread polls: nap now, whatever the step.
    bool hand_over_core = false;
};

class Backoff {
public:
    using Clock = std::chrono::steady_clock;
    using Phases = BackoffPhases;
    using Sleep = BackoffSleep;
    enum class Step { spin, yield, nap };

    explicit Backoff(Phases phases = {}, Clock::time_point start = Clock::now());

    // What the wait should do before its next poll at `now`.
    Step step(Clock::time_point now) const;
    // Carries out the step for `now`: returns at once (spin), after a yield, or after a nap as `how` allows.
    void pause(Clock::time_point now, const Sleep& how = {});
    // Progress was seen (a new operation, one completed): back to short naps, as if the wait began at `now`.
    void restart(Clock::time_point now);
    // The longest nap for a wait that has lasted `age`: 1 ms in its first 20 ms, 5 ms to 0.2 s, 25 ms to 2 s,
    // then 200 ms (a peer that late loses at most a tenth more).
    static std::chrono::microseconds nap_cap(Clock::duration age);

private:
    // The plain nap to take now; each call doubles the next one, up to the cap.
    std::chrono::microseconds next_nap(Clock::time_point now);
    std::chrono::microseconds cap(Clock::time_point now) const;

    Phases phases_;
    Clock::time_point start_;
    std::chrono::microseconds nap_;
};

}  // namespace ccl_core
