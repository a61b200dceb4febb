#include "registered_pool.hpp"

#include <ccl_core/errors.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace ccl_core::detail {
namespace {

// The cache keeps freed blocks for reuse (FSDP asks for the same sizes every step) up to these bounds.
constexpr std::size_t kCacheBlocks = 64;
constexpr std::size_t kCacheBytes = std::size_t{1} << 30;

std::size_t page_rounded(std::size_t bytes) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
}

std::string dev_shm_room() {
    struct statvfs fs {};
    if (::statvfs("/dev/shm", &fs) != 0) return "its size is unknown";
    return "it has " + std::to_string((fs.f_bavail * fs.f_frsize) >> 20) + " MiB free of " +
           std::to_string((fs.f_blocks * fs.f_frsize) >> 20) + " MiB";
}

void unmap(char* base, std::size_t bytes) { ::munmap(base, bytes); }

}  // namespace

std::shared_ptr<RegisteredPool> RegisteredPool::create(std::uint64_t token, RetiredSerials* retired) {
    return std::shared_ptr<RegisteredPool>(new RegisteredPool(token, retired));
}

RegisteredPool::~RegisteredPool() {
    // blocks still held by someone keep their mapping (their deleter finds the pool gone and releases them itself)
    for (auto& [bytes, block] : cache_) {
        unmap(block->data, block->bytes);
        ::shm_unlink(block->name.c_str());
    }
    for (auto& [peer, mappings] : peers_) {
        for (auto& [serial, m] : mappings) unmap(m.base, m.bytes);
    }
}

std::string RegisteredPool::name_of(pid_t pid, std::uint64_t serial) const {
    return "/" + std::to_string(pid) + ":ccl_core:pool:" + std::to_string(token_) + ":" + std::to_string(serial);
}

std::shared_ptr<RegisteredPool::Block> RegisteredPool::allocate(std::size_t bytes) {
    const std::size_t rounded = page_rounded(bytes);
    std::unique_ptr<Block> block;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (auto it = cache_.find(rounded); it != cache_.end()) {
            block = std::move(it->second);
            cache_.erase(it);
            cached_bytes_ -= rounded;
        }
    }
    if (!block) {
        block = std::make_unique<Block>();
        block->bytes = rounded;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            block->serial = next_serial_++;
        }
        block->name = name_of(::getpid(), block->serial);
        const int fd = ::shm_open(block->name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
        // reserved now: with only ftruncate, a full /dev/shm would SIGBUS the first rank that touches a page
        const int reserved = fd < 0 ? errno : ::posix_fallocate(fd, 0, static_cast<off_t>(rounded));
        void* data = reserved == 0 ? ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (fd >= 0) ::close(fd);
        if (data == MAP_FAILED) {
            if (fd >= 0) ::shm_unlink(block->name.c_str());
            std::lock_guard<std::mutex> lock(mutex_);
            if (!warned_) {
                warned_ = true;
                std::fprintf(stderr, "[ccl_core] registered memory: /dev/shm cannot hold %zu more bytes (%s; %s): "
                             "this and later allocations use ordinary memory, and collectives on them copy as usual. "
                             "Give /dev/shm more room (docker run --shm-size=...) to read peers' buffers in place.\n",
                             rounded, std::strerror(reserved ? reserved : errno), dev_shm_room().c_str());
            }
            return nullptr;
        }
        block->data = static_cast<char*>(data);
    }
    std::weak_ptr<RegisteredPool> pool = weak_from_this();
    std::shared_ptr<Block> held(block.release(), [pool](Block* b) {
        if (auto p = pool.lock()) {
            p->give_back(b);
        } else {
            unmap(b->data, b->bytes);
            ::shm_unlink(b->name.c_str());
            delete b;
        }
    });
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_[held->data] = held;
    return held;
}

std::shared_ptr<RegisteredPool::Block> RegisteredPool::find(const void* p, std::size_t bytes, Where& where) const {
    const char* at = static_cast<const char*>(p);
    std::shared_ptr<Block> block;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = in_use_.upper_bound(at);
        if (it == in_use_.begin()) return nullptr;
        block = std::prev(it)->second.lock();
    }
    // outside the lock: were this the last reference, its release takes the lock
    if (!block || at < block->data || at + bytes > block->data + block->bytes) return nullptr;
    where = {block->serial, static_cast<std::uint64_t>(at - block->data)};
    return block;
}

void RegisteredPool::give_back(Block* raw) {
    std::unique_ptr<Block> block(raw);
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = in_use_.find(block->data); it != in_use_.end() && it->second.expired()) in_use_.erase(it);
    if (!block->peers_write && cache_.size() < kCacheBlocks && cached_bytes_ + block->bytes <= kCacheBytes) {
        cached_bytes_ += block->bytes;
        cache_.emplace(block->bytes, std::move(block));
        return;
    }
    retire(std::move(block));
}

// Unlinked and unmapped here; its serial goes to the ring the peers read, so that they unmap it too.
void RegisteredPool::retire(std::unique_ptr<Block> block) {
    unmap(block->data, block->bytes);
    ::shm_unlink(block->name.c_str());
    const std::uint64_t n = __atomic_load_n(&retired_->count, __ATOMIC_RELAXED);
    __atomic_store_n(&retired_->ring[n % RetiredSerials::kKept], block->serial, __ATOMIC_RELAXED);
    __atomic_store_n(&retired_->count, n + 1, __ATOMIC_RELEASE);
}

namespace {

// Opens a peer's block and maps `need` bytes or more of it, once it is what it should be: ours (uid), private (mode),
// large enough. Throws BackendError naming the peer and the block otherwise.
std::pair<char*, std::size_t> map_checked(const std::string& name, int peer, std::size_t need, bool writable) {
    const int fd = ::shm_open(name.c_str(), (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW, 0);
    if (fd < 0) {
        throw BackendError("registered memory: rank " + std::to_string(peer) + "'s block " + name + " cannot be opened: " +
                           std::strerror(errno));
    }
    struct stat st {};
    std::string refusal;
    if (::fstat(fd, &st) != 0) {
        refusal = std::string("fstat failed: ") + std::strerror(errno);
    } else if (st.st_uid != ::geteuid()) {
        refusal = "it belongs to uid " + std::to_string(st.st_uid);
    } else if ((st.st_mode & 077) != 0) {
        refusal = "others may access it";
    } else if (static_cast<std::size_t>(st.st_size) < need) {
        refusal = "it holds " + std::to_string(st.st_size) + " bytes, fewer than the " + std::to_string(need) + " used";
    }
    const int protection = writable ? PROT_READ | PROT_WRITE : PROT_READ;
    void* base = refusal.empty() ? ::mmap(nullptr, static_cast<std::size_t>(st.st_size), protection, MAP_SHARED, fd, 0)
                                 : MAP_FAILED;
    ::close(fd);
    if (base == MAP_FAILED) {
        throw BackendError("registered memory: rank " + std::to_string(peer) + "'s block " + name + " cannot be mapped" +
                           (refusal.empty() ? std::string(": ") + std::strerror(errno) : " (" + refusal + ")"));
    }
    return {static_cast<char*>(base), static_cast<std::size_t>(st.st_size)};
}

}  // namespace

const char* RegisteredPool::peer_block(int peer, pid_t pid, std::uint64_t serial, std::size_t need) {
    std::lock_guard<std::mutex> lock(peers_mutex_);
    auto& mappings = peers_[peer];
    if (auto it = mappings.find(serial); it != mappings.end() && it->second.bytes >= need) return it->second.base;
    const auto [base, bytes] = map_checked(name_of(pid, serial), peer, need, true);
    if (auto it = mappings.find(serial); it != mappings.end()) unmap(it->second.base, it->second.bytes);
    mappings[serial] = {base, bytes};
    return base;
}

std::shared_ptr<char> RegisteredPool::map_peer_block(int peer, pid_t pid, std::uint64_t serial, std::size_t need) const {
    const auto [base, bytes] = map_checked(name_of(pid, serial), peer, need, true);
    return std::shared_ptr<char>(base, [bytes = bytes](char* b) { unmap(b, bytes); });
}

void RegisteredPool::forget_retired(int peer, const RetiredSerials& retired) {
    std::lock_guard<std::mutex> lock(peers_mutex_);
    auto found = peers_.find(peer);
    if (found == peers_.end() || found->second.empty()) return;
    auto& seen = retired_seen_[peer];
    // read the ring between two reads of the count: a retirement meanwhile makes it read again
    std::uint64_t count, again;
    std::uint64_t ring[RetiredSerials::kKept];
    do {
        count = __atomic_load_n(&retired.count, __ATOMIC_ACQUIRE);
        for (std::size_t i = 0; i < RetiredSerials::kKept; ++i) ring[i] = __atomic_load_n(&retired.ring[i], __ATOMIC_RELAXED);
        again = __atomic_load_n(&retired.count, __ATOMIC_ACQUIRE);
    } while (count != again);
    if (count == seen) return;
    auto& mappings = found->second;
    if (count - seen > RetiredSerials::kKept) {
        for (auto& [serial, m] : mappings) unmap(m.base, m.bytes);
        mappings.clear();
    } else {
        for (std::uint64_t i = seen; i < count; ++i) {
            if (auto it = mappings.find(ring[i % RetiredSerials::kKept]); it != mappings.end()) {
                unmap(it->second.base, it->second.bytes);
                mappings.erase(it);
            }
        }
    }
    seen = count;
}

}  // namespace ccl_core::detail
