// A small TCP key-value server (one thread, poll()) and its client. Messages are length-prefixed:
//   request  = op:u8 key_len:u32 key value_len:u32 value      (op 1 = set, 2 = get-if-present)
//   response = found:u8 value_len:u32 value                    (set answers found = 1, no value)
// A get that finds nothing returns at once; the client retries until its deadline, which keeps the
// server free of waiting state.
#include <ccl_core/errors.hpp>
#include <ccl_core/store.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

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

enum : std::uint8_t { kSet = 1, kGet = 2 };

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

// Returns false on orderly close before any byte was read.
bool read_all(int fd, void* data, std::size_t n) {
    auto p = static_cast<char*>(data);
    std::size_t got = 0;
    while (got < n) {
        ssize_t r = ::recv(fd, p + got, n - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0 && got == 0) return false;
        if (r <= 0) throw Error("TcpStore: connection lost while reading");
        got += static_cast<std::size_t>(r);
    }
    return true;
}

void write_blob(int fd, const void* data, std::uint32_t n) {
    std::uint32_t len = htonl(n);
    write_all(fd, &len, sizeof len);
    if (n) write_all(fd, data, n);
}

bool read_blob(int fd, std::string& out) {
    std::uint32_t len = 0;
    if (!read_all(fd, &len, sizeof len)) return false;
    out.resize(ntohl(len));
    return out.empty() || read_all(fd, out.data(), out.size());
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
        ::listen(listen_fd_, 128);
        socklen_t len = sizeof addr;
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
        port_ = ntohs(addr.sin_port);
        if (::pipe2(wake_, O_CLOEXEC) != 0) throw Error("TcpStore: pipe failed: " + errno_text());
        thread_ = std::thread([this] { serve(); });
    }

    ~Server() {
        char b = 0;
        (void)!::write(wake_[1], &b, 1);
        thread_.join();
        ::close(listen_fd_);
        ::close(wake_[0]);
        ::close(wake_[1]);
    }

    int port() const { return port_; }

private:
    void serve() {
        std::vector<int> clients;
        for (;;) {
            std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
            for (int c : clients) fds.push_back({c, POLLIN, 0});
            if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) break;
            if (fds[0].revents) break;
            if (fds[1].revents & POLLIN) {
                int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
                if (c >= 0) {
                    int one = 1;
                    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    clients.push_back(c);
                }
            }
            for (std::size_t i = 2; i < fds.size(); ++i) {
                if (fds[i].revents && !handle(fds[i].fd)) {
                    ::close(fds[i].fd);
                    clients.erase(std::find(clients.begin(), clients.end(), fds[i].fd));
                }
            }
        }
        for (int c : clients) ::close(c);
    }

    // One request; false when the client is gone or sent garbage.
    bool handle(int fd) {
        try {
            std::uint8_t op = 0;
            std::string key, value;
            if (!read_all(fd, &op, 1) || !read_blob(fd, key) || !read_blob(fd, value)) return false;
            if (op == kSet) {
                data_[key] = std::move(value);
                std::uint8_t found = 1;
                write_all(fd, &found, 1);
                write_blob(fd, nullptr, 0);
                return true;
            }
            if (op != kGet) return false;
            auto it = data_.find(key);
            std::uint8_t found = it != data_.end();
            write_all(fd, &found, 1);
            if (found) {
                write_blob(fd, it->second.data(), static_cast<std::uint32_t>(it->second.size()));
            } else {
                write_blob(fd, nullptr, 0);
            }
            return true;
        } catch (const Error&) {
            return false;
        }
    }

    int listen_fd_ = -1;
    int port_ = 0;
    int wake_[2] = {-1, -1};
    std::map<std::string, std::string> data_;  // touched by the server thread only
    std::thread thread_;
};

class TcpStore::Client {
public:
    Client(const std::string& host, int port, Milliseconds connect_timeout) : where_(host + ":" + std::to_string(port)) {
        sockaddr_in addr = resolve(host, port);
        const auto deadline = std::chrono::steady_clock::now() + connect_timeout;
        for (;;) {
            fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) break;
            std::string why = errno_text();
            ::close(fd_);
            if (std::chrono::steady_clock::now() >= deadline) {
                throw Timeout("TcpStore: cannot connect to " + where_ + " within " +
                              std::to_string(connect_timeout.count()) + " ms (" + why +
                              "); is the server (rank 0) running and MASTER_ADDR/MASTER_PORT right?");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        int one = 1;
        ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    ~Client() { ::close(fd_); }

    // One round trip; returns found.
    bool call(std::uint8_t op, const std::string& key, const Bytes& value, Bytes& out) {
        std::lock_guard<std::mutex> lock(mutex_);
        write_all(fd_, &op, 1);
        write_blob(fd_, key.data(), static_cast<std::uint32_t>(key.size()));
        write_blob(fd_, value.data(), static_cast<std::uint32_t>(value.size()));
        std::uint8_t found = 0;
        std::string reply;
        if (!read_all(fd_, &found, 1) || !read_blob(fd_, reply)) {
            throw Error("TcpStore: server " + where_ + " closed the connection");
        }
        out.assign(reply.begin(), reply.end());
        return found != 0;
    }

    const std::string& where() const { return where_; }

private:
    std::string where_;
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
    client_->call(kSet, key, value, ignored);
}

std::optional<Bytes> TcpStore::try_get(const std::string& key) {
    Bytes out;
    if (!client_->call(kGet, key, {}, out)) return std::nullopt;
    return out;
}

Bytes TcpStore::get(const std::string& key, Milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::microseconds(200);
    Bytes out;
    while (!client_->call(kGet, key, {}, out)) {
        if (std::chrono::steady_clock::now() >= deadline) {
            throw Timeout("TcpStore: key '" + key + "' was not set on " + client_->where() + " within " +
                          std::to_string(timeout.count()) + " ms");
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
    return out;
}

}  // namespace ccl_core
