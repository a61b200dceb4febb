// Two ranks of ccl-core's C++ API, forked from one process, for tests/wheels: it runs on the ccl-core wheel's
// library under Debian bullseye's loader, glibc 2.31 and GCC 10's libstdc++ (no Python there: every CPython here
// needs a newer glibc). Rank 0 prints one line per check it passed; any failure exits non-zero.
#include <ccl_core/communicator.hpp>
#include <ccl_core/errors.hpp>
#include <ccl_core/store.hpp>

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

int run_rank(int rank, const std::string& store_dir) {
    auto store = std::make_shared<ccl_core::FileStore>(store_dir);
    auto comm = ccl_core::Communicator::create(store, rank, 2);

    std::vector<float> values(1 << 16, float(rank + 1)), sums(values.size());
    comm->allreduce(values.data(), sums.data(), values.size(), ccl_core::DType::float32, ccl_core::ReduceOp::sum)
        .wait();
    for (float v : sums) {
        if (v != 3.0f) {
            std::fprintf(stderr, "rank %d: allreduce gave %f, not 3\n", rank, v);
            return 2;
        }
    }
    if (rank == 0) std::printf("allreduce ok (shared memory %s)\n", comm->shared_memory_status().c_str());

    // rank 1 never joins this one: rank 0 times out, and the kept error is raised again by the next wait
    if (rank == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(3));
        return 0;
    }
    std::vector<float> lonely(4, 1.0f);
    auto request = comm->allreduce(lonely.data(), lonely.data(), lonely.size(), ccl_core::DType::float32,
                                   ccl_core::ReduceOp::sum);
    std::string errors[2];
    for (auto& error : errors) {
        try {
            request.wait(std::chrono::milliseconds(1000));
        } catch (const ccl_core::Error& e) {
            error = e.what();
        }
    }
    if (errors[0].empty() || errors[0] != errors[1]) {
        std::fprintf(stderr, "timeout not raised twice alike: '%s' / '%s'\n", errors[0].c_str(), errors[1].c_str());
        return 3;
    }
    std::printf("timeout raised twice: %s\n", errors[0].c_str());
    return 0;
}

int guarded(int rank, const std::string& store_dir) {
    try {
        return run_rank(rank, store_dir);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        return 4;
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s STORE_DIRECTORY\n", argv[0]);
        return 64;
    }
    Dl_info libstdcxx{};
    dladdr(reinterpret_cast<void*>(&std::terminate), &libstdcxx);
    std::printf("glibc %s, libstdc++ %s\n", gnu_get_libc_version(), libstdcxx.dli_fname);
    std::fflush(stdout);
    pid_t child = fork();
    if (child == 0) return guarded(1, argv[1]);  // returns, so that the communicator's destructors clean up
    int status = guarded(0, argv[1]);
    int child_status = 0;
    waitpid(child, &child_status, 0);
    if (!WIFEXITED(child_status) || WEXITSTATUS(child_status) != 0) {
        std::fprintf(stderr, "rank 1 ended with status %d\n", child_status);
        return 5;
    }
    return status;
}
