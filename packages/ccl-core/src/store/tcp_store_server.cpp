// The server of TcpStore: one thread, every socket non-blocking, each connection parsed as bytes arrive, so no
// client can hold the others up. Nothing a client sends is trusted:
// - the op byte is checked before anything else, and each length before any of its bytes is read or stored;
// - keys, values, stored data and the bytes buffered for unfinished frames are capped (the limits in tcp_store_server.hpp);
// - a frame must arrive within kFrameTimeout of its first byte (a slow sender is cut off), while a connection
//   that sends nothing may stay open (ranks keep theirs idle for hours), up to kMaxConnections;
// - running out of file descriptors (EMFILE) sheds the newest connection instead of spinning.
// Wire format (see tcp_store.cpp): request = op:u8 key_len:u32 key value_len:u32 value; response = found:u8
// value_len:u32 value.
#include "tcp_store_server.hpp"

#include <ccl_core/errors.hpp>

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace ccl_core::detail {

namespace {

std::uint32_t read_u32(const std::string& buf, std::size_t at) {
    std::uint32_t v = 0;
    std::memcpy(&v, buf.data() + at, sizeof v);
    return ntohl(v);
}

void append_u32(std::string& out, std::uint32_t v) {
    v = htonl(v);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

TcpStoreServer::TcpStoreServer(int listen_fd) : listen_fd_(listen_fd) {
    if (::pipe2(wake_, O_CLOEXEC) != 0) throw Error(std::string("TcpStore: pipe failed: ") + std::strerror(errno));
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
    thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
    char b = 0;
    (void)!::write(wake_[1], &b, 1);
    thread_.join();
    for (auto& [fd, c] : connections_) ::close(fd);
    ::close(wake_[0]);
    ::close(wake_[1]);
    if (spare_fd_ >= 0) ::close(spare_fd_);
}

TcpStoreServer::Stats TcpStoreServer::stats() const {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return stats_;
}

void TcpStoreServer::accept_all() {
    for (;;) {
        int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
            if (errno == EINTR) continue;
            if ((errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
                // out of descriptors: free the spare one, take the connection and close it at once, so that the
                // listening socket does not stay readable (poll would spin); then keep a spare again
                // (Linux reports EMFILE before it looks at the queue: stop once the queue is empty)
                ::close(spare_fd_);
                c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
                if (c >= 0) ::close(c);
                spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (c < 0) return;
                count([](Stats& s) { ++s.refused; });
                continue;
            }
            return;  // EAGAIN: nothing more to accept
        }
        if (connections_.size() >= kMaxConnections) {
            ::close(c);
            count([](Stats& s) { ++s.refused; });
            continue;
        }
        int one = 1;
        ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        connections_.emplace(c, Connection{});
        count([](Stats& s) { ++s.accepted; });
    }
}

// Reads what is there and answers every complete frame; false when the connection must close.
bool TcpStoreServer::read_from(int fd, Connection& c, Clock::time_point now) {
    char chunk[65536];
    for (;;) {
        const std::size_t room = kMaxFrameBytes - c.in.size();
        const ssize_t r = ::recv(fd, chunk, std::min(sizeof chunk, room == 0 ? std::size_t{1} : room), 0);
        if (r == 0) return false;
        if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        if (buffered_ + static_cast<std::size_t>(r) > kMaxBufferedBytes) return false;  // too much half-sent data
        if (c.in.empty()) c.frame_started = now;
        c.in.append(chunk, static_cast<std::size_t>(r));
        buffered_ += static_cast<std::size_t>(r);
        if (!parse(c)) return false;
    }
}

// Consumes complete frames at the front of c.in; false on a malformed or oversized one.
bool TcpStoreServer::parse(Connection& c) {
    for (;;) {
        if (c.in.empty()) return true;
        const auto op = static_cast<std::uint8_t>(c.in[0]);
        if (op != kOpSet && op != kOpGet) return false;  // before any length is believed
        if (c.in.size() < 5) return true;
        const std::uint32_t key_len = read_u32(c.in, 1);
        if (key_len == 0 || key_len > kMaxKeyBytes) return false;
        if (c.in.size() < 5 + key_len + 4) return true;
        const std::uint32_t value_len = read_u32(c.in, 5 + key_len);
        if (value_len > kMaxValueBytes || (op == kOpGet && value_len != 0)) return false;
        const std::size_t frame = 5 + key_len + 4 + value_len;
        if (c.in.size() < frame) return true;
        std::string key = c.in.substr(5, key_len);
        std::string reply;
        if (op == kOpSet) {
            std::string value = c.in.substr(5 + key_len + 4, value_len);
            auto it = data_.find(key);
            const std::size_t old = it == data_.end() ? 0 : it->first.size() + it->second.size();
            if (it == data_.end() && data_.size() >= kMaxKeys) return false;
            if (stored_ - old + key.size() + value.size() > kMaxStoredBytes) return false;
            stored_ = stored_ - old + key.size() + value.size();
            data_[std::move(key)] = std::move(value);
            reply.push_back(1);
            append_u32(reply, 0);
        } else {
            auto it = data_.find(key);
            reply.push_back(it != data_.end() ? 1 : 0);
            append_u32(reply, it != data_.end() ? static_cast<std::uint32_t>(it->second.size()) : 0);
            if (it != data_.end()) reply += it->second;
        }
        c.in.erase(0, frame);
        buffered_ -= frame;
        c.out += reply;
        count([](Stats& s) { ++s.requests; });
    }
}

bool TcpStoreServer::write_to(int fd, Connection& c) {
    while (!c.out.empty()) {
        const ssize_t w = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (w < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        c.out.erase(0, static_cast<std::size_t>(w));
    }
    return true;
}

void TcpStoreServer::close_connection(int fd) {
    auto it = connections_.find(fd);
    if (it == connections_.end()) return;
    buffered_ -= it->second.in.size();
    ::close(fd);
    connections_.erase(it);
    count([](Stats& s) { ++s.dropped; });
}

void TcpStoreServer::serve() {
    std::vector<pollfd> fds;
    for (;;) {
        fds.assign({{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}});
        for (const auto& [fd, c] : connections_) {
            fds.push_back({fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
        }
        // wake at least once a second to cut off slow frames
        if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) break;
        if (fds[0].revents) break;
        const auto now = Clock::now();
        for (std::size_t i = 2; i < fds.size(); ++i) {
            const int fd = fds[i].fd;
            auto it = connections_.find(fd);
            if (it == connections_.end()) continue;
            Connection& c = it->second;
            bool keep = true;
            if (fds[i].revents & (POLLERR | POLLNVAL)) keep = false;
            if (keep && (fds[i].revents & (POLLIN | POLLHUP))) keep = read_from(fd, c, now);
            if (keep && !c.out.empty()) keep = write_to(fd, c);
            if (keep && !c.in.empty() && now - c.frame_started > kFrameTimeout) keep = false;  // slowloris
            if (keep && c.out.size() > kMaxFrameBytes) keep = false;  // a client that sends but never reads
            if (!keep) close_connection(fd);
        }
        if (fds[1].revents & POLLIN) accept_all();
    }
}

}  // namespace ccl_core::detail
