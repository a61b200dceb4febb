#include <ccl_core/backoff.hpp>

#include <sched.h>

#include <algorithm>
#include <iterator>
#include <thread>

namespace ccl_core {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr microseconds kFirstNap{20};

struct Cap {
    milliseconds from_age;
    microseconds cap;
};
// Oldest first. A poll of oneCCL is not free (docs/performance.md, "Waiting"): with these caps a 10 s wait polls
// about 160 times.
constexpr Cap kCaps[] = {{milliseconds(2000), microseconds(200000)},
                         {milliseconds(200), microseconds(25000)},
                         {milliseconds(20), microseconds(5000)},
                         {milliseconds(0), microseconds(1000)}};

}  // namespace

Backoff::Backoff(Phases phases, Clock::time_point start) : phases_(phases), start_(start), nap_(kFirstNap) {}

microseconds Backoff::nap_cap(Clock::duration age) {
    for (const Cap& c : kCaps) {
        if (age >= c.from_age) return c.cap;
    }
    return kCaps[std::size(kCaps) - 1].cap;
}

Backoff::Step Backoff::step(Clock::time_point now) const {
    const auto age = now - start_;
    if (age < phases_.spin) return Step::spin;
    if (age < phases_.yield) return Step::yield;
    return Step::nap;
}

microseconds Backoff::next_nap(Clock::time_point now) {
    const auto age = now - start_;
    microseconds cap = nap_cap(age);
    if (age < phases_.transfer && phases_.transfer_nap.count() > 0) cap = std::min(cap, phases_.transfer_nap);
    const microseconds nap = std::min(nap_, cap);
    if (age >= phases_.short_naps) nap_ = std::min(nap * 2, cap);
    return nap;
}

void Backoff::pause(Clock::time_point now) {
    switch (step(now)) {
        case Step::spin:
            return;
        case Step::yield:
            ::sched_yield();
            return;
        case Step::nap:
            std::this_thread::sleep_for(next_nap(now));
            return;
    }
}

void Backoff::restart(Clock::time_point now) {
    start_ = now;
    nap_ = kFirstNap;
}

}  // namespace ccl_core
