// Every core a rank owns: large copies and reductions of the shared-memory path split across a few threads of this
// process, as many as the rank's share of cores (CCL_CORE_THREADS; else its affinity, the host's cores shared among
// its ranks, and the threads it computes with: ccl_core/threads.hpp, or OMP_NUM_THREADS; the smallest). A rank pinned
// to one core, or run by torchrun with its default OMP_NUM_THREADS=1, keeps one thread. Helpers sleep on a futex
// while there is nothing to split, after a short spin (the next piece of a large message follows at once); the
// caller always works too.
// Each element is written by one thread, from the same sources in the same order as without helpers: the same bits.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

#include <sys/types.h>

namespace ccl_core::detail {

class WorkerPool {
public:
    // The process's pool (a forked child gets one of its own, empty until asked for threads).
    static WorkerPool& instance();
    // Threads for the parts of one job, the caller included: set at most once per process, by the first group that
    // knows its host (later groups of the process share it). 1: no helpers.
    static int threads_for(int local_ranks, int host_cpus);
    void use(int threads);
    int threads() const { return threads_.load(std::memory_order_relaxed); }

    // Calls part(i) for every i in [0, parts), spread over threads() threads (the caller among them); returns when
    // all are done. One job at a time: two callers take turns.
    void run(int parts, const std::function<void(int)>& part);

    // [begin, end) of part i of n, over `count` items in runs of `multiple` (whole cache lines of elements).
    static void split(std::size_t count, std::size_t multiple, int i, int n, std::size_t& begin, std::size_t& end);

private:
    WorkerPool() = default;
    void helper();
    // Claims and runs parts of job `job` until none is left (or a later job replaced it: a helper that woke late).
    void take_parts(std::uint32_t job);

    std::atomic<int> threads_{1};
    std::mutex start_mutex_;  // starting helpers
    int started_ = 0;
    std::mutex job_mutex_;  // one job at a time
    std::atomic<std::uint32_t> job_{0};  // the futex word: bumped for each job, after part_ and parts_ are set
    std::atomic<const std::function<void(int)>*> part_{nullptr};
    std::atomic<int> parts_{0};
    std::atomic<std::uint64_t> claim_{0};  // (job << 32) | the next part to run: a part is claimed by one thread
    std::atomic<int> left_{0};  // parts of the current job not yet done
    pid_t owner_ = 0;
};

}  // namespace ccl_core::detail
