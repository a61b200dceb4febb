#include <ccl_core/errors.hpp>
#include <ccl_core/store.hpp>

#include "store_polls.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

namespace ccl_core {

FileStore::FileStore(std::string directory) : directory_(std::move(directory)) {
    if (directory_.empty()) throw InvalidArgument("FileStore: directory must not be empty");
    if (::mkdir(directory_.c_str(), 0700) != 0 && errno != EEXIST) {
        throw InvalidArgument("FileStore: cannot create directory '" + directory_ + "': " + std::strerror(errno));
    }
}

std::string FileStore::path_of(const std::string& key) const {
    // Keys contain '/' (prefixes); keep them flat and file-system safe.
    std::string name;
    for (char c : key) {
        bool safe = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
        if (safe) {
            name += c;
        } else {
            char buf[4];
            std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
            name += buf;
        }
    }
    return directory_ + "/" + name;
}

void FileStore::set(const std::string& key, const Bytes& value) {
    const std::string path = path_of(key);
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(value.data()), static_cast<std::streamsize>(value.size()));
        if (!out) throw Error("FileStore: cannot write '" + tmp + "'");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        throw Error("FileStore: cannot rename '" + tmp + "': " + std::strerror(errno));
    }
}

std::optional<Bytes> FileStore::try_get(const std::string& key) {
    std::ifstream in(path_of(key), std::ios::binary);
    if (!in) return std::nullopt;
    return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Bytes FileStore::get(const std::string& key, Milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    Backoff backoff(detail::kStorePolls);
    for (;;) {
        if (auto value = try_get(key)) return *value;
        if (std::chrono::steady_clock::now() >= deadline) {
            throw Timeout("FileStore: key '" + key + "' did not appear in '" + directory_ + "' within " +
                          std::to_string(timeout.count()) + " ms");
        }
        backoff.pause(std::chrono::steady_clock::now(), {{}, {}, deadline});
    }
}

}  // namespace ccl_core
