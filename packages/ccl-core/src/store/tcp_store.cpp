// A small TCP key-value store: its server (tcp_store_server.cpp) and its client. Messages are length-prefixed:
//   request  = op:u8 key_len:u32 key value_len:u32 value      (op 1 = set, 2 = get-if-present)
//   response = found:u8 value_len:u32 value                    (set answers found = 1, no value)
// A get that finds nothing returns at once; the client retries until its deadline, which keeps the
// server free of waiting state. Every client call has a deadline: a server that does not answer in time gives
// a Timeout, and the connection is made anew for the next call (a half-read answer would desynchronise it).
#include <ccl_core/errors.hpp>
#include <ccl_core/store.hpp>

#include "store_polls.hpp"
#include "tcp_store_server.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ccl_core {
namespace {

using detail::kOpGet;
using detail::kOpSet;
constexpr Milliseconds kCallTimeout{60000};  // for set and try_get, which have no timeout of their own

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const void* data, std::size_t n) {
    auto p = static_cast<const char*>(data);
    while (n > 0) {
        ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) throw Error("TcpStore: send failed: " + errno_text());
        p += w;
        n -= static_cast<std::size_t>(w);
    }
}

// Reads n bytes before `deadline`; false when the deadline passed first. Throws when the peer closed.
bool read_all(int fd, void* data, std::size_t n, std::chrono::steady_clock::time_point deadline) {
    auto p = static_cast<char*>(data);
    std::size_t got = 0;
    while (got < n) {
        const auto left = std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        pollfd pfd{fd, POLLIN, 0};
        const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
        if (ready < 0 && errno != EINTR) throw Error("TcpStore: poll failed: " + errno_text());
        if (ready <= 0) continue;
        ssize_t r = ::recv(fd, p + got, n - got, 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r <= 0) throw Error("TcpStore: connection lost while reading");
        got += static_cast<std::size_t>(r);
    }
    return true;
}


sockaddr_in resolve(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0 || !res) throw InvalidArgument("TcpStore: cannot resolve host '" + host + "': " + gai_strerror(rc));
    sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
    ::freeaddrinfo(res);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    return addr;
}

}  // namespace

class TcpStore::Server {
public:
    Server(const std::string& host, int port) {
        sockaddr_in addr = resolve(host, port);
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
            std::string why = errno_text();
            ::close(listen_fd_);
            throw InvalidArgument("TcpStore: cannot listen on " + host + ":" + std::to_string(port) + ": " + why);
        }
        ::listen(listen_fd_, 1024);
        socklen_t len = sizeof addr;
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
        port_ = ntohs(addr.sin_port);
        loop_ = std::make_unique<detail::TcpStoreServer>(listen_fd_);
    }

    ~Server() {
        loop_.reset();
        ::close(listen_fd_);
    }

    int port() const { return port_; }
    detail::TcpStoreServer::Stats stats() const { return loop_->stats(); }

private:
    int listen_fd_ = -1;
    int port_ = 0;
    std::unique_ptr<detail::TcpStoreServer> loop_;
};

class TcpStore::Client {
public:
    Client(const std::string& host, int port, Milliseconds connect_timeout)
        : addr_(resolve(host, port)), where_(host + ":" + std::to_string(port)), connect_timeout_(connect_timeout) {
        connect(std::chrono::steady_clock::now() + connect_timeout);
    }
    ~Client() {
        if (fd_ >= 0) ::close(fd_);
    }

    // One round trip, answered before `deadline` or Timeout; returns found.
    bool call(std::uint8_t op, const std::string& key, const Bytes& value, Bytes& out,
              std::chrono::steady_clock::time_point deadline) {
        if (key.empty() || key.size() > detail::kMaxKeyBytes) {
            throw InvalidArgument("TcpStore: keys must have 1 to " + std::to_string(detail::kMaxKeyBytes) +
                                  " bytes, got " + std::to_string(key.size()));
        }
        if (value.size() > detail::kMaxValueBytes) {
            throw InvalidArgument("TcpStore: values are limited to " + std::to_string(detail::kMaxValueBytes) +
                                  " bytes, got " + std::to_string(value.size()));
        }
        std::lock_guard<std::mutex> lock(mutex_);
        if (fd_ < 0) connect(std::min(deadline, std::chrono::steady_clock::now() + connect_timeout_));
        std::string frame(1, static_cast<char>(op));
        append_blob(frame, key.data(), key.size());
        append_blob(frame, value.data(), value.size());
        write_all(fd_, frame.data(), frame.size());
        std::uint8_t found = 0;
        std::uint32_t len = 0;
        bool answered = read_all(fd_, &found, 1, deadline) && read_all(fd_, &len, sizeof len, deadline);
        len = ntohl(len);
        if (answered && len > detail::kMaxValueBytes) {
            drop();
            throw Error("TcpStore: server " + where_ + " answered with an impossible length " + std::to_string(len));
        }
        out.resize(len);
        answered = answered && (len == 0 || read_all(fd_, out.data(), len, deadline));
        if (!answered) {
            drop();  // the answer may still come: this connection is out of step now
            throw Timeout("TcpStore: server " + where_ + " did not answer in time");
        }
        return found != 0;
    }

    const std::string& where() const { return where_; }

private:
    static void append_blob(std::string& frame, const void* data, std::size_t n) {
        const std::uint32_t len = htonl(static_cast<std::uint32_t>(n));
        frame.append(reinterpret_cast<const char*>(&len), sizeof len);
        frame.append(static_cast<const char*>(data), n);
    }

    void connect(std::chrono::steady_clock::time_point deadline) {
        Backoff retry(detail::kConnectRetry);
        for (;;) {
            fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr_), sizeof addr_) == 0) break;
            std::string why = errno_text();
            ::close(fd_);
            fd_ = -1;
            if (std::chrono::steady_clock::now() >= deadline) {
                throw Timeout("TcpStore: cannot connect to " + where_ + " within " +
                              std::to_string(connect_timeout_.count()) + " ms (" + why +
                              "); is the server (rank 0) running and MASTER_ADDR/MASTER_PORT right?");
            }
            retry.pause(std::chrono::steady_clock::now(), {{}, {}, deadline});
        }
        int one = 1;
        ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }

    void drop() {
        ::close(fd_);
        fd_ = -1;
    }

    sockaddr_in addr_;
    std::string where_;
    Milliseconds connect_timeout_;
    int fd_ = -1;
    std::mutex mutex_;
};

TcpStore::TcpStore(const Options& options) {
    if (options.port < 0 || options.port > 65535) {
        throw InvalidArgument("TcpStore: port " + std::to_string(options.port) + " is out of range 0..65535");
    }
    int port = options.port;
    if (options.is_server) {
        server_ = std::make_unique<Server>(options.host, options.port);
        port = server_->port();
    } else if (port == 0) {
        throw InvalidArgument("TcpStore: a client needs the server's port");
    }
    port_ = port;
    client_ = std::make_unique<Client>(options.host, port, options.connect_timeout);
}

TcpStore::~TcpStore() {
    client_.reset();
    server_.reset();
}

int TcpStore::port() const { return port_; }

void TcpStore::set(const std::string& key, const Bytes& value) {
    Bytes ignored;
    client_->call(kOpSet, key, value, ignored, std::chrono::steady_clock::now() + kCallTimeout);
}

std::optional<Bytes> TcpStore::try_get(const std::string& key) {
    Bytes out;
    if (!client_->call(kOpGet, key, {}, out, std::chrono::steady_clock::now() + kCallTimeout)) return std::nullopt;
    return out;
}

Bytes TcpStore::get(const std::string& key, Milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    Backoff backoff(detail::kStorePolls);
    Bytes out;
    for (;;) {
        bool found = false;
        try {
            found = client_->call(kOpGet, key, {}, out, deadline);
        } catch (const Timeout&) {
            found = false;  // the server did not answer before our deadline: report it as the key's timeout
        }
        if (found) break;
        if (std::chrono::steady_clock::now() >= deadline) {
            throw Timeout("TcpStore: key '" + key + "' was not set on " + client_->where() + " within " +
                          std::to_string(timeout.count()) + " ms");
        }
        backoff.pause(std::chrono::steady_clock::now(), {{}, {}, deadline});
    }
    return out;
}

}  // namespace ccl_core
