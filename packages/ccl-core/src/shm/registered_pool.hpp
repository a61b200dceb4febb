// Registered memory: buffers that every rank of a host group can read in place (Communicator::allocate, torch's
// allocateTensor). With them a collective reads its peers' buffers directly, and each byte moves once.
//
// Each block is a file of its own in /dev/shm, mapped by its owner and, lazily, by the peers that read it. Its name
// is made from the owner's pid, the group's segment token and a serial number, "/<pid>:ccl_core:pool:<token>:<serial>",
// so that peers build it themselves from numbers (nothing but numbers crosses between ranks, checked before use) and
// the clean-up of a dead rank's files (its pid prefix) covers it. A block whose last holder lets go (the tensor, and
// every operation that reads it) returns to a cache and is reused for the next allocation of its size (unless peers
// were given it to write); evicted from the cache, it is unlinked and its serial retired, so that peers unmap it too.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <sys/types.h>

namespace ccl_core::detail {

// Serials a rank retired, in the shared segment where its peers read them: a ring of the last kKept and their count.
struct RetiredSerials {
    static constexpr std::size_t kKept = 32;
    std::uint64_t count;  // written last (release), after the ring entry
    std::uint64_t ring[kKept];
};

class RegisteredPool : public std::enable_shared_from_this<RegisteredPool> {
public:
    struct Block {
        char* data = nullptr;
        std::size_t bytes = 0;   // page-rounded: what the file holds and what is mapped
        std::uint64_t serial = 0;
        std::string name;        // in /dev/shm
        // Handed to peers to map writable (one-sided windows): a peer may still write after its owner let go, so
        // the block is retired then, never reused, and late writes land in memory only that peer still maps.
        std::atomic<bool> peers_write{false};
    };
    // Where a buffer lies, as peers find it: the block's serial and the buffer's offset in it.
    struct Where {
        std::uint64_t serial = 0;
        std::uint64_t offset = 0;
    };

    // `retired`: this rank's RetiredSerials in the shared segment (the pool writes it; peers read it).
    static std::shared_ptr<RegisteredPool> create(std::uint64_t token, RetiredSerials* retired);
    ~RegisteredPool();

    // A block of at least `bytes` (zero-filled on first use, reused contents after). nullptr when /dev/shm cannot
    // hold it: the caller falls back to ordinary memory; the first time, a warning names /dev/shm's size.
    std::shared_ptr<Block> allocate(std::size_t bytes);
    // The block of ours that holds [p, p + bytes) while someone holds it, with p's place in it; nullptr otherwise.
    std::shared_ptr<Block> find(const void* p, std::size_t bytes, Where& where) const;

    // A peer's block mapped here, readable and writable (an allreduce in place stores its share into its peers'
    // outputs, while the op keeps them alive), cached until its owner retires it. Throws BackendError when it cannot
    // be mapped or is not what it should be (owner, mode, size).
    const char* peer_block(int peer, pid_t pid, std::uint64_t serial, std::size_t need);
    // A peer's block mapped here for reading and writing (one-sided windows), checked as peer_block checks it. The
    // mapping is the caller's, apart from the cache above: it lives as long as the pointer, whatever the owner does.
    std::shared_ptr<char> map_peer_block(int peer, pid_t pid, std::uint64_t serial, std::size_t need) const;
    // Unmaps the peer's blocks its owner retired (its RetiredSerials); when it retired more than the ring keeps since
    // the last look, every mapping of that peer goes (they are made again when next needed).
    void forget_retired(int peer, const RetiredSerials& retired);

private:
    RegisteredPool(std::uint64_t token, RetiredSerials* retired) : token_(token), retired_(retired) {}
    std::string name_of(pid_t pid, std::uint64_t serial) const;
    void give_back(Block* block);  // the last holder let go: to the cache, or retired
    void retire(std::unique_ptr<Block> block);

    const std::uint64_t token_;
    mutable std::mutex mutex_;
    std::uint64_t next_serial_ = 1;
    std::map<const char*, std::weak_ptr<Block>> in_use_;  // by address, for find()
    std::multimap<std::size_t, std::unique_ptr<Block>> cache_;  // by bytes
    std::size_t cached_bytes_ = 0;
    RetiredSerials* const retired_;
    bool warned_ = false;

    struct PeerMapping {
        char* base;
        std::size_t bytes;
    };
    std::mutex peers_mutex_;
    std::unordered_map<int, std::unordered_map<std::uint64_t, PeerMapping>> peers_;  // peer -> serial -> mapping
    std::unordered_map<int, std::uint64_t> retired_seen_;                           // peer -> retired count seen
};

}  // namespace ccl_core::detail
