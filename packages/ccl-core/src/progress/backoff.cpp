#include <ccl_core/backoff.hpp>

#include <sched.h>

#include <algorithm>
#include <iterator>
#include <thread>

namespace ccl_core {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

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

Backoff::Backoff(Phases phases, Clock::time_point start) : phases_(phases), start_(start), nap_(phases.first_nap) {}

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

microseconds Backoff::cap(Clock::time_point now) const {
    const auto age = now - start_;
    microseconds c = phases_.max_nap.count() > 0 ? phases_.max_nap : nap_cap(age);
    if (age < phases_.transfer && phases_.transfer_nap.count() > 0) c = std::min(c, phases_.transfer_nap);
    return c;
}

microseconds Backoff::next_nap(Clock::time_point now) {
    const microseconds c = cap(now);
    const microseconds nap = std::min(nap_, c);
    if (now - start_ >= phases_.short_naps) nap_ = std::min(nap * 2, c);
    return nap;
}

void Backoff::pause(Clock::time_point now, const Sleep& how) {
    const Step s = how.hand_over_core ? Step::nap : step(now);
    if (s == Step::spin) return;
    if (s == Step::yield) {
        ::sched_yield();
        return;
    }
    auto bounded = [&](microseconds d) {
        if (how.bound.count() > 0) d = std::min(d, how.bound);
        if (how.until) d = std::min(d, std::chrono::duration_cast<microseconds>(*how.until - now) + microseconds(1));
        return std::max(d, microseconds(0));
    };
    if (how.on_peers && how.on_peers(bounded(cap(now)))) return;
    const microseconds nap = bounded(next_nap(now));
    if (how.plain) {
        how.plain(nap);
    } else {
        std::this_thread::sleep_for(nap);
    }
}

void Backoff::restart(Clock::time_point now) {
    start_ = now;
    nap_ = phases_.first_nap;
}

}  // namespace ccl_core
