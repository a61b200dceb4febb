// The engine's group: rendezvous, join, oneCCL's communicator, abort, argument checks and issuing (engine.hpp).
#include <ccl_core/oneccl/engine.hpp>

#include <ccl_core/oneccl/store_kvs.hpp>
#include <ccl_core/runtime.hpp>

#include "shm_cleanup.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <thread>
#include <set>
#include <sstream>

#include <csignal>
#include <cstdlib>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

namespace ccl_core {

std::mutex& engine_mutex() {
    static std::mutex m;
    return m;
}

namespace {

// Who shares a host: the hostname plus the kernel's boot id (containers may share a hostname), never
// launcher variables such as LOCAL_WORLD_SIZE, which are wrong for sub-groups.
std::string host_identity() {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    std::string boot;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
    return std::string(name) + "/" + boot;
}

// The pid namespace this process lives in ("pid:[4026531836]"), "" when unknown.
std::string pid_namespace() {
    char link[64] = {};
    const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
    return n > 0 ? std::string(link, static_cast<std::size_t>(n)) : std::string();
}

// The cpus this process may run on, as "0,1,5". Launchers that pin ranks (Intel MPI) give each rank its own:
// whether ranks outnumber cores is decided on the union over the ranks of a host.
std::string affinity_list() {
    cpu_set_t set;
    std::string out;
    if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &set)) out += (out.empty() ? "" : ",") + std::to_string(cpu);
    }
    return out;
}

// A pid handed over by the store is used only if it is a plain number from our own pid namespace.
bool pid_means_something(const std::string& pid, const std::string& its_namespace, const std::string& ours) {
    return !its_namespace.empty() && its_namespace == ours && !pid.empty() && pid.size() < 10 &&
           pid.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

Engine::Engine(std::shared_ptr<Store> store, int rank, int size, CommunicatorOptions options, EngineSettings settings)
    : store_(std::move(store)), rank_(rank), size_(size), options_(std::move(options)), settings_(std::move(settings)) {}

std::shared_ptr<Engine> Engine::create(std::shared_ptr<Store> store, int rank, int size,
                                       const CommunicatorOptions& options, EngineSettings settings) {
    const std::string where = "creating a " + settings.kind;  // "creating a device communicator: ..."
    if (!store) throw InvalidArgument(where + ": store is null");
    if (size < 1) throw InvalidArgument(where + ": size must be >= 1, got " + std::to_string(size));
    if (rank < 0 || rank >= size) {
        throw InvalidArgument(where + ": rank " + std::to_string(rank) + " is out of range for size " +
                              std::to_string(size) + " (0.." + std::to_string(size - 1) + ")");
    }
    if (options.timeout.count() <= 0) throw InvalidArgument(where + ": timeout must be positive");
    initialize_runtime();

    std::shared_ptr<Engine> engine(new Engine(std::move(store), rank, size, options, std::move(settings)));
    engine->join(std::chrono::steady_clock::now() + options.timeout);
    const std::string prefix = engine->settings_.key_prefix;
    try {
        engine->kvs_ = std::make_shared<detail::StoreKvs>(std::make_shared<PrefixStore>(prefix + "/oneccl", engine->store_), 0);
        engine->comm_ = std::make_unique<ccl::communicator>(
            engine->settings_.connect ? engine->settings_.connect(size, rank, engine->kvs_)
                                      : ccl::create_communicator(size, rank, engine->kvs_));
    } catch (const std::exception& e) {
        throw BackendError("bootstrap of " + engine->describe() + ": oneCCL could not create the communicator: " + e.what());
    }
    return engine;
}

// oneCCL's rendezvous (through our store, see StoreKvs) has no useful timeout of its own: first make sure that every
// rank has arrived, so that a missing one is named in a clear error. Each rank announces
// "<host identity>\n<pid>\n<cpus>\n<pid namespace>": the host identities tell how many ranks share a host, the pids of
// same-host peers let survivors clean up after a peer that was killed (shm_cleanup.hpp) and notice its death while
// waiting (only within our pid namespace: a pid from another container means nothing here), and their cpus tell
// whether the host's ranks outnumber cores.
void Engine::join(std::chrono::steady_clock::time_point deadline) {
    auto remaining = [&] {
        return std::max(Milliseconds(0), std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now()));
    };
    const auto key = [&](int r) { return settings_.key_prefix + "/joined/" + std::to_string(r); };
    const std::string me = host_identity();
    const std::string my_pid_namespace = pid_namespace();
    const std::string announcement = me + "\n" + std::to_string(::getpid()) + "\n" + affinity_list() + "\n" +
                                     my_pid_namespace;
    store_->set(key(rank_), Bytes(announcement.begin(), announcement.end()));
    std::vector<int> missing;
    std::set<std::string> host_cpus;
    int same_host = 0;
    for (int r = 0; r < size_; ++r) {
        try {
            Bytes bytes = store_->get(key(r), missing.empty() ? remaining() : Milliseconds(0));
            std::istringstream text(std::string(bytes.begin(), bytes.end()));
            std::string identity, pid, cpus, cpu, pid_ns;
            std::getline(text, identity);
            std::getline(text, pid);
            std::getline(text, cpus);
            std::getline(text, pid_ns);
            if (identity != me) continue;
            ++same_host;
            if (r != rank_ && pid_means_something(pid, pid_ns, my_pid_namespace)) {
                local_peer_pids_.push_back({r, std::stoi(pid)});
            }
            std::istringstream list(cpus);
            while (std::getline(list, cpu, ',')) host_cpus.insert(cpu);
        } catch (const Timeout&) {
            missing.push_back(r);
        }
    }
    local_ranks_ = same_host;
    oversubscribed_ = !host_cpus.empty() && same_host > static_cast<int>(host_cpus.size());
    if (!missing.empty()) {
        std::string list;
        for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
        throw Timeout("bootstrap of " + describe() + ": rank(s) " + list + " did not join within " +
                      std::to_string(options_.timeout.count()) + " ms");
    }
}

Engine::~Engine() {
    if (aborted_.load()) {
        (void)comm_.release();
        new std::shared_ptr<ccl::kvs_interface>(std::move(kvs_));  // likewise never destroyed
        return;
    }
    if (!comm_) return;  // creation failed: no barrier to protect
    local_path_.reset();
    comm_.reset();  // oneCCL's destructor synchronises the ranks through the store
    kvs_.reset();
    wait_for_departures();
}

void Engine::wait_for_departures() noexcept {
    try {
        PrefixStore departed(settings_.key_prefix + "/departed", store_);
        departed.set(std::to_string(rank_), Bytes{'1'});
        if (rank_ != 0) return;
        const auto limit = std::min(options_.timeout, Milliseconds(10000));
        const auto deadline = std::chrono::steady_clock::now() + limit;
        for (int r = 1; r < size_; ++r) {
            const auto left = std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return;
            (void)departed.get(std::to_string(r), left);
        }
    } catch (const std::exception&) {
        // a store that is gone or a rank that never came: nothing more to protect
    }
}

std::string Engine::describe() const {
    return settings_.kind + " '" + options_.name + "' (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
}

std::string Engine::all_ranks() const { return size_ == 1 ? "rank 0" : "ranks 0-" + std::to_string(size_ - 1); }

void Engine::abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_.exchange(true)) return;
    abort_reason_ = reason;
    std::vector<pid_t> pids;
    for (const auto& peer : local_peer_pids_) pids.push_back(peer.second);
    detail::remove_shm_of_dead_processes(pids);
}

void Engine::throw_if_aborted(const char* op) const {
    if (!aborted_.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lock(abort_mutex_);
    throw CommunicatorAborted(std::string(op) + ": " + describe() + " was aborted and cannot be used any more (" +
                              abort_reason_ + ")");
}

std::string Engine::dead_local_peer() const {
    for (const auto& [r, pid] : local_peer_pids_) {
        if (detail::process_is_gone(pid)) return "rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ")";
    }
    return "";
}

namespace {

// The thread that makes the calls of engines whose calls block (EngineSettings::calls_block), one after another in
// the order they were issued, as oneCCL requires of every rank. One per process, never destroyed (a call stuck on a
// dead peer never returns); a forked child makes its own.
// At the process's exit a call stuck on a dead peer would run on inside oneCCL while oneCCL's globals are destroyed,
// and crash the exit: the thread is parked first, in a signal handler that never returns.
class BlockingCallThread {
public:
    static BlockingCallThread& instance() {
        static std::mutex made;
        std::lock_guard<std::mutex> lock(made);
        if (!current_ || current_->owner_ != ::getpid()) {
            current_ = new BlockingCallThread();  // a forked child's own; the parent's stays behind
            static const bool parks_at_exit = std::atexit(park_if_in_call) == 0;
            (void)parks_at_exit;
        }
        return *current_;
    }
    void post(std::function<void()> call) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            calls_.push_back(std::move(call));
        }
        wake_.notify_one();
    }

private:
    BlockingCallThread() : owner_(::getpid()) {
        std::thread worker([this] { run(); });
        thread_ = worker.native_handle();
        worker.detach();
    }
    void run() {
        std::unique_lock<std::mutex> lock(mutex_);
        while (true) {
            wake_.wait(lock, [&] { return !calls_.empty(); });
            std::function<void()> call = std::move(calls_.front());
            calls_.pop_front();
            lock.unlock();
            in_call_.store(true);
            call();
            in_call_.store(false);
            call = nullptr;  // releases what it held before the next wait
            lock.lock();
        }
    }

    static void park(int) {
        parked_ = 1;
        for (;;) ::pause();
    }
    static void park_if_in_call() {
        BlockingCallThread* t = current_;
        if (!t || t->owner_ != ::getpid() || !t->in_call_.load()) return;
        struct sigaction action {};
        action.sa_handler = park;
        ::sigaction(park_signal(), &action, nullptr);
        ::pthread_kill(t->thread_, park_signal());
        for (int i = 0; i < 1000 && !parked_; ++i) ::usleep(100);  // bounded: the exit must go on
    }
    // a real-time signal that libraries seldom take (glibc keeps the first ones for itself)
    static int park_signal() { return SIGRTMIN + 7; }

    static inline BlockingCallThread* current_ = nullptr;
    static inline volatile std::sig_atomic_t parked_ = 0;
    const pid_t owner_;
    pthread_t thread_;
    std::atomic<bool> in_call_{false};
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::function<void()>> calls_;
};

}  // namespace

void OneCclOperation::call(const std::function<ccl::event(ccl::communicator&)>& start, ccl::communicator& comm) {
    try {
        std::lock_guard<std::mutex> lock(engine_mutex());
        event_ = start(comm);
    } catch (...) {
        call_failure_ = std::current_exception();
    }
    issued_.store(true, std::memory_order_release);
}

Request Engine::issue(const char* op, std::string peers, const std::function<ccl::event(ccl::communicator&)>& start,
                      std::function<void()> finish) {
    throw_if_aborted(op);
    if (settings_.calls_block) {
        auto operation = std::make_shared<OneCclOperation>(shared_from_this(), op, std::move(peers), std::move(finish),
                                                           ccl::event());
        operation->issued_.store(false);
        BlockingCallThread::instance().post([operation, start] {
            operation->call(start, *operation->engine()->comm_);
        });
        return Request(operation);
    }
    ccl::event event;
    {
        std::lock_guard<std::mutex> lock(engine_mutex());
        try {
            event = start(*comm_);
        } catch (const Error&) {
            throw;  // ours (an argument check inside start): already names the problem
        } catch (const std::exception& e) {
            throw BackendError(std::string(op) + " on " + describe() + ": oneCCL refused the operation: " + e.what());
        }
    }
    return Request(std::make_shared<OneCclOperation>(shared_from_this(), op, std::move(peers), std::move(finish),
                                                     std::move(event)));
}

// ---- argument checks (each names the operation and the bad value) -------------------------------------------

void Engine::check_rank(const char* op, const char* what, int r) const {
    if (r < 0 || r >= size_) {
        throw InvalidArgument(std::string(op) + ": " + what + " " + std::to_string(r) + " is out of range for a group of " +
                              std::to_string(size_) + " rank(s) (0.." + std::to_string(size_ - 1) + ")");
    }
}

void Engine::check_counts(const char* op, const char* name, const std::vector<std::size_t>& counts) const {
    if (counts.size() != static_cast<std::size_t>(size_)) {
        throw InvalidArgument(std::string(op) + ": " + name + " has " + std::to_string(counts.size()) +
                              " entries; expected one per rank (" + std::to_string(size_) + ")");
    }
}

void Engine::check_buffer(const char* op, const char* name, const void* p, std::size_t count) {
    if (p == nullptr && count > 0) {
        throw InvalidArgument(std::string(op) + ": " + name + " is null but must hold " + std::to_string(count) + " elements");
    }
}

}  // namespace ccl_core
