#include "worker_pool.hpp"

#include "../settings.hpp"

#include <ccl_core/threads.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ccl_core::detail {
namespace {

// A helper that finished a part keeps looking for the next job this long before it sleeps: the pieces of a large
// message follow each other within microseconds.
constexpr auto kSpin = std::chrono::microseconds(50);

void cpu_relax() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

std::atomic<int> compute_threads{0};  // set_compute_threads(); 0: none given

}  // namespace

WorkerPool& WorkerPool::instance() {
    static std::mutex made;
    static WorkerPool* pool = nullptr;
    std::lock_guard<std::mutex> lock(made);
    if (!pool || pool->owner_ != ::getpid()) {  // a forked child: the parent's helpers do not exist there
        pool = new WorkerPool();  // never destroyed: helpers sleep in it until the process ends
        pool->owner_ = ::getpid();
    }
    return *pool;
}

int WorkerPool::threads_for(int local_ranks, int host_cpus) {
    const std::string set = setting_text("CCL_CORE_THREADS");
    if (!set.empty()) return static_cast<int>(std::max<std::size_t>(1, parse_bytes("CCL_CORE_THREADS", set)));
    cpu_set_t mask;
    int mine = CPU_SETSIZE;
    if (::sched_getaffinity(0, sizeof mask, &mask) == 0) mine = CPU_COUNT(&mask);
    int share = std::max(1, host_cpus / std::max(1, local_ranks));
    if (const int hint = compute_threads.load(); hint > 0) {
        share = std::min(share, hint);
    } else if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && std::atoi(omp) > 0) {
        share = std::min(share, std::atoi(omp));
    }
    return std::max(1, std::min(mine, share));
}

void WorkerPool::use(int threads) {
    std::lock_guard<std::mutex> lock(start_mutex_);
    if (started_ > 0 || threads <= 1) return;
    for (int i = 1; i < threads; ++i) std::thread([this] { helper(); }).detach();
    started_ = threads - 1;
    threads_.store(threads);
}

void WorkerPool::split(std::size_t count, std::size_t multiple, int i, int n, std::size_t& begin, std::size_t& end) {
    const std::size_t units = (count + multiple - 1) / multiple;
    const std::size_t per = units / static_cast<std::size_t>(n), extra = units % static_cast<std::size_t>(n);
    const auto u = static_cast<std::size_t>(i);
    begin = std::min(count, (u * per + std::min(u, extra)) * multiple);
    end = std::min(count, ((u + 1) * per + std::min(u + 1, extra)) * multiple);
}

void WorkerPool::take_parts(std::uint32_t job) {
    std::uint64_t claim = claim_.load(std::memory_order_acquire);
    for (;;) {
        const auto index = static_cast<std::uint32_t>(claim & 0xffffffffu);
        const auto parts = static_cast<std::uint32_t>(parts_.load(std::memory_order_relaxed));
        if (static_cast<std::uint32_t>(claim >> 32) != job || index >= parts) return;
        if (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel)) continue;
        (*part_.load(std::memory_order_relaxed))(static_cast<int>(index));  // the job cannot end before this part
        left_.fetch_sub(1, std::memory_order_release);
        claim = claim_.load(std::memory_order_acquire);
    }
}

void WorkerPool::run(int parts, const std::function<void(int)>& part) {
    if (parts <= 1 || threads() <= 1 || ::getpid() != owner_) {
        for (int i = 0; i < parts; ++i) part(i);
        return;
    }
    std::lock_guard<std::mutex> lock(job_mutex_);
    const std::uint32_t job = job_.load(std::memory_order_relaxed) + 1;
    // closed first: a helper still holding the last job's final claim must fail its exchange, not take a part of
    // this job under that job's number while part_ and parts_ change
    claim_.store((static_cast<std::uint64_t>(job) << 32) | 0xffffffffu, std::memory_order_release);
    part_.store(&part, std::memory_order_relaxed);
    parts_.store(parts, std::memory_order_relaxed);
    left_.store(parts, std::memory_order_relaxed);
    claim_.store(static_cast<std::uint64_t>(job) << 32, std::memory_order_release);
    job_.store(job, std::memory_order_release);  // helpers that see it see the job
    ::syscall(SYS_futex, &job_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
    take_parts(job);
    while (left_.load(std::memory_order_acquire) != 0) cpu_relax();  // the others' parts are as short as ours
}

void WorkerPool::helper() {
    std::uint32_t seen = job_.load(std::memory_order_acquire);
    for (;;) {
        const auto until = std::chrono::steady_clock::now() + kSpin;
        std::uint32_t now = job_.load(std::memory_order_acquire);
        while (now == seen && std::chrono::steady_clock::now() < until) {
            cpu_relax();
            now = job_.load(std::memory_order_acquire);
        }
        if (now == seen) {
            ::syscall(SYS_futex, &job_, FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
            continue;
        }
        seen = now;
        take_parts(now);
    }
}

}  // namespace ccl_core::detail

void ccl_core::set_compute_threads(int threads) { detail::compute_threads.store(threads); }
