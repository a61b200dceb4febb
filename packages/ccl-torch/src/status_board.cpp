#include "status_board.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

namespace ccl_torch {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPublishEvery(500);  // at most one store write per group per interval
constexpr std::chrono::milliseconds kHeartbeat(5000);     // unchanged entries are written again this often
constexpr const char* kFormat = "ccl-whereabouts-1";
constexpr std::size_t kFields = 12;
constexpr std::size_t kMaxEntry = 1024;  // an entry is a few hundred bytes; anything longer is not ours

int64_t wall_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string host_name() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    return host;
}

std::string key_of(int rank) { return "ccl_torch/whereabouts/" + std::to_string(rank); }

std::string seconds(int64_t ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(std::max<int64_t>(ms, 0)) / 1000.0);
    return buf;
}

// One rank's entry, as published: parsed strictly, since it comes from the store.
struct Entry {
    std::string host;
    int64_t pid = 0, published_ms = 0;
    uint64_t issued_seq = 0;
    std::string op, dtype;
    int64_t numel = 0, tensors = 0, issued_ms = 0;
    uint64_t done_seq = 0;
    int64_t done_ms = 0;
};

bool plain(const std::string& s) {
    return s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char c) { return c >= ' ' && c < 127; });
}

std::optional<Entry> parse(const std::string& text) {
    if (text.size() > kMaxEntry) return std::nullopt;
    std::vector<std::string> f;
    std::string field;
    std::istringstream in(text);
    while (std::getline(in, field, '\t')) f.push_back(field);
    if (f.size() != kFields || f[0] != kFormat) return std::nullopt;
    for (const auto& s : f) {
        if (!plain(s)) return std::nullopt;
    }
    Entry e;
    try {
        e.host = f[1];
        e.pid = std::stoll(f[2]);
        e.published_ms = std::stoll(f[3]);
        e.issued_seq = std::stoull(f[4]);
        e.op = f[5];
        e.dtype = f[6];
        e.numel = std::stoll(f[7]);
        e.tensors = std::stoll(f[8]);
        e.issued_ms = std::stoll(f[9]);
        e.done_seq = std::stoull(f[10]);
        e.done_ms = std::stoll(f[11]);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    return e;
}

std::string moves_text(const std::string& dtype, int64_t numel, int64_t tensors) {
    std::string s = dtype + "[" + std::to_string(numel) + "]";
    if (tensors > 1) s += " and " + std::to_string(tensors - 1) + " more tensor(s)";
    return s;
}

// "rank 2: #41 broadcast float32[8], done 14.3 s ago; nothing issued since (busy elsewhere, or it skipped #42)"
std::string describe(int rank, const Entry& e, uint64_t my_seq, int64_t now, bool me) {
    std::ostringstream line;
    line << "  rank " << rank << (me ? " (this rank)" : "") << " on " << e.host << " (pid " << e.pid << "): ";
    if (e.issued_seq == 0) {
        line << "no op issued yet";
    } else {
        line << "#" << e.issued_seq << " " << e.op << " " << moves_text(e.dtype, e.numel, e.tensors);
        if (e.done_seq >= e.issued_seq) {
            line << ", done " << seconds(now - e.done_ms) << " ago; nothing issued since";
        } else {
            line << ", issued " << seconds(now - e.issued_ms) << " ago, not complete";
        }
    }
    if (!me && my_seq > 0) {
        if (e.issued_seq < my_seq) {
            line << " -- has not reached #" << my_seq << " (busy elsewhere, stuck in an earlier op, or it skipped one)";
        } else if (e.issued_seq == my_seq) {
            line << " -- in the same op";
        } else {
            line << " -- ahead of this rank";
        }
    }
    if (!me && now - e.published_ms > 2 * kHeartbeat.count() + kPublishEvery.count()) {
        line << "; last heard from " << seconds(now - e.published_ms) << " ago: its process may be stopped or gone";
    }
    return line.str();
}

// ---- the publishing thread ----------------------------------------------------------------------------------

class Publisher {
public:
    // Started by the first board of a process (a forked child starts its own); never destroyed: its thread is
    // detached, so that exit never waits on a store that stopped answering.
    static Publisher& instance() {
        std::lock_guard<std::mutex> lock(made_);
        Publisher* p = current_.load();
        if (!p || p->owner_ != ::getpid()) {
            p = new Publisher();
            current_.store(p);
        }
        return *p;
    }
    // The process's publisher if it was started, else nullptr.
    static Publisher* existing() {
        Publisher* p = current_.load();
        return p && p->owner_ == ::getpid() ? p : nullptr;
    }
    void watch(const std::shared_ptr<StatusBoard>& board) {
        std::lock_guard<std::mutex> lock(mutex_);
        boards_.push_back(board);
    }
    std::vector<std::shared_ptr<StatusBoard>> live() {
        std::lock_guard<std::mutex> lock(mutex_);
        std::vector<std::shared_ptr<StatusBoard>> out;
        for (const auto& w : boards_) {
            if (auto b = w.lock()) out.push_back(std::move(b));
        }
        return out;
    }
    void stop() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        wake();
        std::unique_lock<std::mutex> lock(mutex_);
        stopped_cv_.wait_for(lock, std::chrono::seconds(2), [&] { return stopped_; });
    }
    void wake() const {
        const char byte = 'w';
        (void)!::write(pipe_[1], &byte, 1);
    }
    static void on_signal(int) {
        // async-signal-safe: one byte into the pipe; the thread prints
        const char byte = 's';
        (void)!::write(signal_pipe_, &byte, 1);
    }

private:
    Publisher() : owner_(::getpid()) {
        if (::pipe(pipe_) != 0) pipe_[0] = pipe_[1] = -1;
        signal_pipe_ = pipe_[1];
        install_signal();
        std::thread([this] { run(); }).detach();
    }

    void install_signal() {
        const char* want = std::getenv("CCL_TORCH_EXPLAIN_SIGNAL");
        const std::string name = want && *want ? want : "SIGUSR1";
        int sig = 0;
        if (name == "none") return;
        if (name == "SIGUSR1") sig = SIGUSR1;
        else if (name == "SIGUSR2") sig = SIGUSR2;
        else if (name == "SIGWINCH") sig = SIGWINCH;
        else if (name == "SIGPWR") sig = SIGPWR;
        if (sig == 0) {
            std::fprintf(stderr, "[oneccl_bindings_for_pytorch] CCL_TORCH_EXPLAIN_SIGNAL=%s is not one of SIGUSR1, "
                         "SIGUSR2, SIGWINCH, SIGPWR or none: no signal prints where the ranks are\n", name.c_str());
            return;
        }
        struct sigaction current {};
        if (::sigaction(sig, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;  // someone else's
        struct sigaction mine {};
        mine.sa_handler = &Publisher::on_signal;
        sigemptyset(&mine.sa_mask);
        mine.sa_flags = SA_RESTART;
        ::sigaction(sig, &mine, nullptr);
    }

    void run() {
        std::vector<std::shared_ptr<StatusBoard>> failed;
        for (;;) {
            pollfd fd{pipe_[0], POLLIN, 0};
            const int ready = ::poll(&fd, 1, static_cast<int>(kPublishEvery.count()));
            bool print = false;
            if (ready > 0 && (fd.revents & POLLIN)) {
                char buf[64];
                const ssize_t n = ::read(pipe_[0], buf, sizeof buf);
                for (ssize_t i = 0; i < n; ++i) print |= buf[i] == 's';
            }
            {
                std::lock_guard<std::mutex> lock(mutex_);
                if (stop_) {
                    stopped_ = true;
                    stopped_cv_.notify_all();
                    return;
                }
            }
            if (print) {
                const std::string report = explain_all_groups();
                std::fprintf(stderr, "%s", report.c_str());
                std::fflush(stderr);
            }
            for (const auto& board : live()) {
                if (!board->publish(kHeartbeat)) forget(board.get());
            }
        }
    }

    void forget(const StatusBoard* board) {
        std::lock_guard<std::mutex> lock(mutex_);
        boards_.erase(std::remove_if(boards_.begin(), boards_.end(), [&](const std::weak_ptr<StatusBoard>& w) {
                          auto b = w.lock();
                          return !b || b.get() == board;
                      }),
                      boards_.end());
    }

    const pid_t owner_;
    int pipe_[2] = {-1, -1};
    static inline int signal_pipe_ = -1;
    static inline std::mutex made_;
    static inline std::atomic<Publisher*> current_{nullptr};
    std::mutex mutex_;
    std::condition_variable stopped_cv_;
    bool stop_ = false, stopped_ = false;
    std::vector<std::weak_ptr<StatusBoard>> boards_;
};

}  // namespace

std::shared_ptr<StatusBoard> StatusBoard::create(c10::intrusive_ptr<c10d::Store> store, std::string group, int rank,
                                                 int size) {
    return std::shared_ptr<StatusBoard>(new StatusBoard(std::move(store), std::move(group), rank, size));
}

StatusBoard::StatusBoard(c10::intrusive_ptr<c10d::Store> store, std::string group, int rank, int size)
    : store_(std::move(store)), group_(std::move(group)), rank_(rank), size_(size), host_(host_name()) {
    version_ = 1;  // published once at the start: a rank that never issues shows as idle, not as unknown
}

void StatusBoard::issued(uint64_t seq, const char* op, Moves moves) {
    const int64_t now = wall_ms();
    std::lock_guard<std::mutex> lock(mutex_);
    issued_seq_ = seq;
    issued_op_ = op;
    issued_moves_ = moves;
    issued_at_ms_ = now;
    ++version_;
}

void StatusBoard::completed(uint64_t seq) {
    const int64_t now = wall_ms();
    std::lock_guard<std::mutex> lock(mutex_);
    if (seq <= done_seq_) return;
    done_seq_ = seq;
    done_at_ms_ = now;
    ++version_;
}

std::string StatusBoard::entry_locked() const {
    std::ostringstream e;
    e << kFormat << '\t' << host_ << '\t' << ::getpid() << '\t' << wall_ms() << '\t' << issued_seq_ << '\t'
      << issued_op_ << '\t' << (issued_seq_ ? c10::toString(issued_moves_.dtype) : "none") << '\t'
      << issued_moves_.numel << '\t' << issued_moves_.tensors << '\t' << issued_at_ms_ << '\t' << done_seq_ << '\t'
      << done_at_ms_;
    return e.str();
}

bool StatusBoard::publish(std::chrono::milliseconds heartbeat) {
    std::string entry;
    uint64_t version;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (store_failed_) return false;
        const auto now = Clock::now();
        if (version_ == published_version_ && now - published_at_ < heartbeat) return true;
        entry = entry_locked();
        version = version_;
        published_at_ = now;
    }
    try {
        store_->set(key_of(rank_), std::vector<uint8_t>(entry.begin(), entry.end()));
    } catch (const std::exception&) {
        std::lock_guard<std::mutex> lock(mutex_);
        store_failed_ = true;  // the store's host is gone: nothing to tell anyone any more
        return false;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    published_version_ = std::max(published_version_, version);
    return true;
}

std::string StatusBoard::explain(std::chrono::milliseconds budget) const {
    const auto deadline = Clock::now() + budget;
    const int64_t now = wall_ms();
    uint64_t my_seq;
    std::optional<Entry> mine;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        my_seq = issued_seq_ > done_seq_ ? issued_seq_ : 0;
        mine = parse(entry_locked());
    }
    std::ostringstream out;
    out << "\nWhere the ranks of group '" << group_ << "' are (each publishes its last op to the store every "
        << kPublishEvery.count() / 1000.0 << " s):";
    for (int r = 0; r < size_; ++r) {
        if (r == rank_) {
            out << "\n" << describe(r, *mine, my_seq, now, true);
            continue;
        }
        if (Clock::now() >= deadline) {
            out << "\n  ranks " << r << "-" << size_ - 1 << ": not read (the store did not answer within "
                << budget.count() << " ms)";
            break;
        }
        try {
            if (!store_->check({key_of(r)})) {
                out << "\n  rank " << r << ": has published nothing (it never created this group, or cannot reach "
                    << "the store)";
                continue;
            }
            const auto bytes = store_->get(key_of(r));
            const auto entry = parse(std::string(bytes.begin(), bytes.end()));
            if (!entry) {
                out << "\n  rank " << r << ": its entry in the store is not one ccl wrote (ignored)";
                continue;
            }
            out << "\n" << describe(r, *entry, my_seq, now, false);
        } catch (const std::exception& e) {
            out << "\n  ranks " << r << "-" << size_ - 1 << ": not read (the store failed: "
                << std::string(e.what()).substr(0, 200) << ")";
            break;
        }
    }
    return out.str();
}

void watch_board(const std::shared_ptr<StatusBoard>& board) { Publisher::instance().watch(board); }

std::string explain_all_groups() {
    std::string report;
    Publisher* publisher = Publisher::existing();
    for (const auto& board : publisher ? publisher->live() : std::vector<std::shared_ptr<StatusBoard>>{}) {
        report += "[oneccl_bindings_for_pytorch] pid " + std::to_string(::getpid()) + ", group '" + board->group() +
                  "':" + board->explain() + "\n";
    }
    if (report.empty()) report = "[oneccl_bindings_for_pytorch] pid " + std::to_string(::getpid()) + ": no ccl group\n";
    return report;
}

void stop_publishing() {
    if (Publisher* publisher = Publisher::existing()) publisher->stop();
}

}  // namespace ccl_torch
