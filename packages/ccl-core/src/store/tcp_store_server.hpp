// TcpStore's server (tcp_store_server.cpp): a poll() loop over non-blocking sockets, with caps on everything a
// client controls. The limits are documented in docs/failures.md ("Reliability").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

namespace ccl_core::detail {

constexpr std::uint8_t kOpSet = 1;
constexpr std::uint8_t kOpGet = 2;

constexpr std::size_t kMaxKeyBytes = 4096;
constexpr std::size_t kMaxValueBytes = 16u << 20;       // oneCCL's addresses and our records are far smaller
constexpr std::size_t kMaxFrameBytes = 5 + kMaxKeyBytes + 4 + kMaxValueBytes;
constexpr std::size_t kMaxKeys = 1u << 20;
constexpr std::size_t kMaxStoredBytes = 256u << 20;     // keys and values held
constexpr std::size_t kMaxBufferedBytes = 256u << 20;   // bytes of frames not yet complete, over all connections
constexpr std::size_t kMaxConnections = 4096;
constexpr std::chrono::seconds kFrameTimeout{10};       // from a frame's first byte to its last

class TcpStoreServer {
public:
    explicit TcpStoreServer(int listen_fd);  // takes a bound, listening socket (not its ownership)
    ~TcpStoreServer();

    struct Stats {
        std::size_t accepted = 0, refused = 0, dropped = 0, requests = 0;
    };
    Stats stats() const;

private:
    using Clock = std::chrono::steady_clock;
    struct Connection {
        std::string in, out;
        Clock::time_point frame_started{};
    };

    void serve();
    void accept_all();
    bool read_from(int fd, Connection& c, Clock::time_point now);
    bool parse(Connection& c);
    bool write_to(int fd, Connection& c);
    void close_connection(int fd);
    template <class F>
    void count(F&& f) {
        std::lock_guard<std::mutex> lock(stats_mutex_);
        f(stats_);
    }

    int listen_fd_;
    int wake_[2] = {-1, -1};
    int spare_fd_ = -1;  // given up when descriptors run out (EMFILE), to shed a connection
    std::unordered_map<int, Connection> connections_;
    std::map<std::string, std::string> data_;
    std::size_t stored_ = 0;
    std::size_t buffered_ = 0;
    mutable std::mutex stats_mutex_;
    Stats stats_;
    std::thread thread_;
};

}  // namespace ccl_core::detail
