// The key-value store through which ranks meet. Bootstrap needs only set and a blocking get; any store
// offering those works (torch's c10d::Store in ccl-torch, the file and TCP stores here, a Python object).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ccl_core {

using Bytes = std::vector<std::uint8_t>;
using Milliseconds = std::chrono::milliseconds;

class Store {
public:
    virtual ~Store() = default;
    virtual void set(const std::string& key, const Bytes& value) = 0;
    // Waits until `key` exists; throws Timeout after `timeout`.
    virtual Bytes get(const std::string& key, Milliseconds timeout) = 0;
    // The value if `key` exists now, without waiting. The default asks get() with a zero timeout.
    virtual std::optional<Bytes> try_get(const std::string& key);
};

// Puts every key under "<prefix>/" so that several communicators can share one store.
class PrefixStore final : public Store {
public:
    PrefixStore(std::string prefix, std::shared_ptr<Store> inner);
    void set(const std::string& key, const Bytes& value) override;
    Bytes get(const std::string& key, Milliseconds timeout) override;
    std::optional<Bytes> try_get(const std::string& key) override;

private:
    std::string prefix_;
    std::shared_ptr<Store> inner_;
};

// One file per key in a directory every rank can see (a local or shared file system).
// Writes go through a temporary file and rename(), so a reader never sees half a value.
class FileStore final : public Store {
public:
    explicit FileStore(std::string directory);
    void set(const std::string& key, const Bytes& value) override;
    Bytes get(const std::string& key, Milliseconds timeout) override;
    std::optional<Bytes> try_get(const std::string& key) override;
    const std::string& directory() const { return directory_; }

private:
    std::string path_of(const std::string& key) const;
    std::string directory_;
};

// A store served over TCP by one process (usually rank 0) to all others.
// The server binds only the given host address; use "0.0.0.0" explicitly to listen everywhere.
class TcpStore final : public Store {
public:
    struct Options {
        std::string host = "127.0.0.1";
        int port = 0;               // 0 with is_server: pick a free port, see port()
        bool is_server = false;
        Milliseconds connect_timeout{30000};
    };
    explicit TcpStore(const Options& options);
    ~TcpStore() override;
    void set(const std::string& key, const Bytes& value) override;
    Bytes get(const std::string& key, Milliseconds timeout) override;
    std::optional<Bytes> try_get(const std::string& key) override;
    int port() const;

    class Server;
    class Client;

private:
    std::unique_ptr<Server> server_;
    std::unique_ptr<Client> client_;
    int port_ = 0;
};

}  // namespace ccl_core
