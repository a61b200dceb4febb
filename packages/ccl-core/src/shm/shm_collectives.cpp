// The shared-memory path (shm_collectives.hpp). Its protocol, as every rank follows it:
//
// The segment. A SegmentHeader (the token that proves every rank mapped the same segment; the futex word `generation`
// and the count of ranks sleeping on it), one RankHeader per rank, then two halves of `size` slots each and two result
// areas, one per half. Only rank r writes RankHeader r and slot (h, r); any rank may read them. Each rank reserves the
// pages it writes (reserve_own_pages: its slots, its share of the result areas), so that on a host of several NUMA
// nodes they live on the writer's node: a write stays local, and each peer's read crosses the link once.
//
// Sequence numbers. An op takes one number per segment of its message, in issue order, the same on every rank
// (first_seq, first_seq + 1, ...). Each rank publishes how far it got in counters of its RankHeader, each on its own
// cache line, each only ever growing, each stored before sleepers are woken (publish):
//   announced  the first_seq of the last op it described, in described[first_seq & 1];
//   arrived    the last seq whose input it placed in its slot of half (seq & 1);
//   reduced    the last seq whose share it reduced into the result area of its half (large allreduce);
//   released   the last op read in place after which it reads no peer's buffer (and, for allreduce, has stored its
//              share into every rank's output).
// A rank describes an op before it places anything of it, so a rank that called another op is found (every rank reads
// every description) before anyone waits for its input.
//
// Reuse. Two halves suffice: a rank places seq s (half s & 1, its slot and, for a large allreduce, the result area)
// only once it completed s - 1, which needs every rank to have arrived at s - 1, which each does only once it
// completed s - 2, the last seq that used half s & 1: nobody reads that half any more. described[first_seq & 1] is
// reused likewise: a rank describes the op that starts at f once it completed the op that ends at f - 1, so every rank
// has arrived at f - 1 and is through with the agreement of any earlier op that started at a seq of f's parity; an op
// read in place completes only once every rank released it, after its last read of a peer's description or buffer.
//
// Steps. Each path keeps its own step per op (CopyStep, InPlaceStep below); the counters above are the only
// synchronisation. Lines that one rank writes on every poll (its core, for peers that share its cpu) are not lines
// others spin on, and are written only when they change.
#include "shm_collectives.hpp"

#include "../settings.hpp"
#include "../kernels/elementwise.hpp"
#include "../parallel/parallel_ops.hpp"
#include "../store/store_text.hpp"

#include <ccl_core/errors.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <ctime>
#include <climits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace ccl_core::detail {

namespace {

constexpr std::size_t kLine = 64;

constexpr std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

constexpr std::size_t kPage = 4096;
// Segment sizes (per slot): the default follows the L2 cache within these bounds; CCL_CORE_SHM_SEGMENT_BYTES may go
// as low as a page, and a size rank 0 hands over is believed only up to kMaxSegment.
constexpr std::size_t kDefaultSegment = 1 << 20;
constexpr std::size_t kMinDefaultSegment = 256 << 10;
constexpr std::size_t kMaxDefaultSegment = 4 << 20;
constexpr std::size_t kMinSegment = kPage;
constexpr std::size_t kMaxSegment = std::size_t{1} << 30;
// Allreduces up to a limit take the one-shot path (one synchronisation, every rank reduces every rank's slot: P x N
// bytes read and (P - 1) N elements combined each), larger ones the two-step path (each rank reduces a 1/P share, then
// gathers the others': about 3 N bytes, one synchronisation more). Measured on the 16-core Xeon, both paths forced
// at every size (docs/performance.md, "Which allreduce path small messages take"): float32 one-shot wins up to 64 KiB
// at 2 ranks, 32 KiB at 4, 2 KiB from 8 on; bfloat16, whose reduction is bound by its rounding, only up to 1 KiB
// (at 2 ranks 16 KiB: above it the 2-vCPU EPYC favours one-shot, the Xeon two-step). CCL_CORE_SHM_SMALL_BYTES sets one
// limit for every dtype.
std::size_t default_small_limit(int size, bool bfloat16) {
    if (bfloat16) return size <= 2 ? 16 << 10 : 1 << 10;
    return size <= 2 ? 64 << 10 : size <= 4 ? 32 << 10 : 2 << 10;
}

// A segment grows with a rank's threads up to this many of them (2 x (ranks + 1) slots of it live in /dev/shm).
constexpr int kMaxSegmentThreads = 8;
// Outputs from this size up are written with stores that bypass the caches: they would not stay there anyway, and the
// stores then neither read the destination's lines first nor evict what the caches hold.
constexpr std::size_t kStreamingBytes = 8 << 20;


std::uint64_t load(const std::uint64_t& v) { return __atomic_load_n(&v, __ATOMIC_ACQUIRE); }

}  // namespace

// What a rank says about the operation that starts at a sequence number, before it places anything: so that ranks can
// compare, and, when their buffers are registered (registered_pool.hpp), read each other's in place.
struct OpDescription {
    std::uint64_t seq;
    std::uint64_t count;
    std::int32_t dtype;
    std::int32_t op;
    std::int32_t kind;
    std::int32_t root;
    std::uint32_t registered;  // kSendRegistered | kRecvRegistered
    std::uint32_t unused;
    RegisteredPool::Where send_at, recv_at;
};
constexpr std::uint32_t kSendRegistered = 1, kRecvRegistered = 2;

// One per rank, each counter on its own cache line (the other ranks poll them; see the protocol at the top).
struct RankHeader {
    alignas(kLine) std::uint64_t arrived;
    alignas(kLine) std::uint64_t reduced;
    alignas(kLine) std::uint64_t announced;
    alignas(kLine) std::uint64_t released;
    alignas(kLine) std::int32_t core;  // the cpu this rank last waited or published on (peer_on_my_core)
    std::int32_t pid;                  // names this rank's registered blocks
    alignas(kLine) OpDescription described[2];
    alignas(kLine) RetiredSerials retired;  // this rank's retired registered blocks (its peers unmap them)
};

struct SegmentHeader {
    std::uint64_t token;   // proves that every rank mapped the same segment
    alignas(kLine) std::uint32_t generation;  // the futex word: bumped after a published counter while ranks sleep
    std::uint32_t sleepers;  // ranks sleeping on it, so that publishing costs no system call when nobody sleeps
};

// Layout: the segment header, one RankHeader per rank, then (page-aligned) 2 x size slots and 2 result areas.
constexpr std::size_t kRankHeadersAt = round_up(sizeof(SegmentHeader), kLine);
std::size_t data_offset(int size) {
    return round_up(kRankHeadersAt + sizeof(RankHeader) * static_cast<std::size_t>(size), kPage);
}
std::size_t segment_bytes_for(int size, std::size_t segment) {
    return data_offset(size) + segment * 2 * static_cast<std::size_t>(size + 1);
}

struct ShmCollectives::Op {
    Kind kind = Kind::allreduce;
    std::shared_ptr<const Runs> runs;  // allgather's output, reduce_scatter's input: where each rank's block lies
    // Registered buffers (held until the op is through: a peer may read them), and where peers find them.
    std::shared_ptr<RegisteredPool::Block> send_block, recv_block;
    RegisteredPool::Where send_at, recv_at;
    bool announced = false;
    bool agreed = false;  // every rank described this op alike (check_agreement passed)
    // copy: through the segment's slots, as always; in_place: every rank's buffers are registered and read directly
    enum class Path { undecided, copy, in_place } path = Path::undecided;
    int root = 0;  // broadcast
    const char* send;
    char* recv;
    std::size_t count;  // allreduce, broadcast: the buffer; allgather: the input; reduce_scatter: the output
    DType dtype;
    ReduceOp op;
    std::size_t element;
    bool small;
    Destination out;  // how copies into the caller's output store (a message larger than the caches bypasses them)
    std::size_t per_segment;  // elements per segment
    std::size_t segments;
    std::uint64_t first_seq;
    // progress
    std::size_t segment = 0;
    // Through the slots, per segment: place this rank's input where the others read it; combine, once every rank's
    // input is there: reduce or take what this rank needs; collect (large allreduce), once every rank reduced its
    // share: copy the others' shares of the result.
    enum class CopyStep { place, combine, collect } copy_step = CopyStep::place;
    // In place, once for the whole op: read what this rank needs out of the peers' buffers (allreduce: reduce its
    // share and store it into every rank's output), then publish `released`; drain: wait until every rank did.
    enum class InPlaceStep { read, drain } in_place_step = InPlaceStep::read;
    bool done = false;
};

namespace {

// The share of a segment of n elements that rank p reduces: whole cache lines, the last share shorter.
struct Share {
    std::size_t begin, length;
};
Share share_of(std::size_t n, std::size_t element, int size, int p) {
    const std::size_t per = round_up((n + static_cast<std::size_t>(size) - 1) / static_cast<std::size_t>(size),
                                     std::max<std::size_t>(1, kLine / element));
    const std::size_t begin = std::min(n, per * static_cast<std::size_t>(p));
    return {begin, std::min(n, begin + per) - begin};
}

std::string dev_shm_room() {
    struct statvfs fs {};
    if (::statvfs("/dev/shm", &fs) != 0) return "/dev/shm: size unknown";
    const auto kib = [&](unsigned long long blocks) { return std::to_string(blocks * fs.f_frsize >> 10) + " KiB"; };
    return "/dev/shm has " + kib(fs.f_bavail) + " free of " + kib(fs.f_blocks);
}

// A segment name from the store is only used if it is one rank 0 could have made: "/<pid>:ccl_core:<token>".
bool plausible_segment_name(const std::string& name) {
    if (name.size() < 2 || name.size() > 128 || name[0] != '/') return false;
    return name.find('/', 1) == std::string::npos && name.find(":ccl_core:") != std::string::npos;
}

// Why the segment behind fd must not be mapped, or "" when it may: it must be rank 0's (our uid), private to
// that uid, and as large as the layout needs (a smaller one would SIGBUS on first touch).
std::string segment_refusal(int fd, std::size_t bytes) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return std::string("fstat failed: ") + std::strerror(errno);
    if (st.st_uid != ::geteuid()) return "it belongs to uid " + std::to_string(st.st_uid) + ", not ours";
    if ((st.st_mode & 077) != 0) return "others may access it (mode " + std::to_string(st.st_mode & 0777) + ")";
    if (static_cast<std::size_t>(st.st_size) < bytes) {
        return "it holds " + std::to_string(st.st_size) + " bytes, fewer than the " + std::to_string(bytes) + " expected";
    }
    return "";
}

// The default segment: the per-core L2 cache the CPU reports, once per thread a rank works with (a segment is
// reduced while the peers' copies of it are still in the caches of the cores that copied it; fewer, larger steps
// cost fewer synchronisations), within 256 KiB..4 MiB a thread, or 1 MiB when the CPU does not say. Measured on a
// 1 MiB-L2 machine: 1 MiB segments beat 256 KiB and 4 MiB ones (docs/performance.md).
std::size_t default_segment_bytes(int threads) {
    const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    const std::size_t per_thread =
        l2 <= 0 ? kDefaultSegment : std::clamp<std::size_t>(static_cast<std::size_t>(l2), kMinDefaultSegment, kMaxDefaultSegment);
    return per_thread * static_cast<std::size_t>(std::clamp(threads, 1, kMaxSegmentThreads));
}

// Reserves (posix_fallocate) the pages of the segment that `rank` writes: its slot in both halves and its share of
// both result areas, plus, for rank 0, the headers. Reserved now, a full /dev/shm cannot SIGBUS a rank at its first
// touch deep inside a collective; reserved by the writer, each page is allocated on the writer's NUMA node (tmpfs
// places a page where the task that allocates it runs), as a rank's own writes would have placed it. Returns errno.
int reserve_own_pages(int fd, int rank, int size, std::size_t segment) {
    const auto reserve = [fd](std::size_t from, std::size_t to) {
        from = from / kPage * kPage;
        to = round_up(to, kPage);
        return from < to ? ::posix_fallocate(fd, static_cast<off_t>(from), static_cast<off_t>(to - from)) : 0;
    };
    const std::size_t data = data_offset(size), n = static_cast<std::size_t>(size), r = static_cast<std::size_t>(rank);
    int failed = rank == 0 ? reserve(0, data) : 0;
    for (std::size_t half = 0; half < 2 && failed == 0; ++half) {
        failed = reserve(data + segment * (half * n + r), data + segment * (half * n + r + 1));
        const std::size_t result = data + segment * (2 * n + half);
        if (failed == 0) failed = reserve(result + segment * r / n, result + segment * (r + 1) / n);
    }
    return failed;
}

}  // namespace

// ---- creation: every decision is rank 0's or unanimous, so that all ranks take the same path --------------------
// Rank 0 offers a segment (its sizes apply to everyone); the others take it and report; rank 0 unlinks it once all
// reported and publishes the verdict. Any rank that cannot, or is told not to (CCL_CORE_SHM=0), take part makes all of
// them fall back to oneCCL.

namespace {

constexpr const char* kOk = "ok";

struct Sizes {
    bool wanted;          // CCL_CORE_SHM
    std::size_t segment;  // per slot
    std::size_t small;    // the one-shot allreduce's limit
    std::size_t small_bf16;  // the same for bfloat16
};

Sizes sizes_from_settings(int size, int threads) {
    const std::size_t segment = round_up(
        std::max<std::size_t>(setting_bytes("CCL_CORE_SHM_SEGMENT_BYTES", default_segment_bytes(threads)), kMinSegment),
        kLine);
    const auto small = [&](bool bf16) {
        return std::min(segment, setting_bytes("CCL_CORE_SHM_SMALL_BYTES", default_small_limit(size, bf16)));
    };
    return {setting_on("CCL_CORE_SHM"), segment, small(false), small(true)};
}

// What a rank ends up with: the mapping (MAP_FAILED if none) and whether it may be used ("ok", or why not).
struct Mapping {
    void* base = MAP_FAILED;
    std::size_t bytes = 0;
    std::string status = kOk;
};

// Rank 0: creates the segment under a name that starts with its pid, like libfabric's regions, so that the clean-up of
// a dead peer's regions (group/dead_processes.hpp) also covers it if rank 0 dies before unlinking; offers it; waits for
// every rank's report; unlinks it (from then on it lives exactly as long as its mappings); publishes the verdict.
Mapping offer_segment(Store& store, int size, Sizes& sizes, Milliseconds timeout) {
    Mapping m;
    m.bytes = segment_bytes_for(size, sizes.segment);
    std::random_device entropy;
    const std::uint64_t token = (static_cast<std::uint64_t>(entropy()) << 32) | entropy();
    const std::string name = "/" + std::to_string(::getpid()) + ":ccl_core:" + std::to_string(token);
    std::string why_not;
    if (sizes.wanted) {
        const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
        // the whole size for the others to map; the pages each rank reserves itself (reserve_own_pages)
        const int reserved = fd < 0 ? errno
                             : ::ftruncate(fd, static_cast<off_t>(m.bytes)) != 0 ? errno
                             : reserve_own_pages(fd, 0, size, sizes.segment);
        if (reserved == 0) {
            m.base = ::mmap(nullptr, m.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        } else {
            why_not = "rank 0 could not reserve its part of a " + std::to_string(m.bytes >> 10) +
                      " KiB segment in /dev/shm (" + std::strerror(reserved) + "; " + dev_shm_room() + ")";
            if (fd >= 0) ::shm_unlink(name.c_str());
        }
        if (fd >= 0) ::close(fd);
    }
    if (m.base != MAP_FAILED) {
        static_cast<SegmentHeader*>(m.base)->token = token;
        auto* ranks = reinterpret_cast<RankHeader*>(static_cast<char*>(m.base) + kRankHeadersAt);
        for (int r = 0; r < size; ++r) ranks[r].core = -1;  // unknown until a rank first notes it
    }
    store.set("ccl_core/shm/name", text(m.base == MAP_FAILED ? std::string() :
        name + "\n" + std::to_string(token) + "\n" + std::to_string(sizes.segment) + "\n" + std::to_string(sizes.small) +
        "\n" + std::to_string(sizes.small_bf16)));
    std::vector<std::string> reports;
    for (int r = 1; r < size; ++r) reports.push_back(text(store.get("ccl_core/shm/mapped/" + std::to_string(r), timeout)));
    if (m.base != MAP_FAILED) {
        ::shm_unlink(name.c_str());
    } else {
        m.status = !sizes.wanted ? "rank 0 has CCL_CORE_SHM=0" : !why_not.empty() ? why_not : "rank 0 could not create it";
        if (!why_not.empty()) {
            std::fprintf(stderr, "[ccl_core] shared-memory path off for this group: %s; its ops go through oneCCL. "
                         "Give /dev/shm more room (docker run --shm-size=1g) for full speed.\n", why_not.c_str());
        }
    }
    for (const auto& report : reports) {
        if (report != kOk) m.status = report;
    }
    store.set("ccl_core/shm/status", text(m.status));
    return m;
}

// Why rank `rank` must not map what rank 0 offered ("" when it may), after mapping it if it may. The name and sizes
// come from the store: believed only if rank 0 could have made them, and the segment behind the name only if it is
// ours, private and as large as the layout needs.
std::string map_offered(int rank, int size, const std::string& name, std::uint64_t token, Sizes& sizes, Mapping& m) {
    const std::string me = "rank " + std::to_string(rank);
    if (!sizes.wanted) return me + " has CCL_CORE_SHM=0";
    if (name.empty()) return "rank 0 offers no segment";
    if (!plausible_segment_name(name) || sizes.segment < kMinSegment || sizes.segment > kMaxSegment ||
        sizes.small > sizes.segment || sizes.small_bf16 > sizes.segment) {
        return me + " was handed an implausible segment (name or sizes)";
    }
    m.bytes = segment_bytes_for(size, sizes.segment);
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_NOFOLLOW, 0600);
    if (fd < 0) return me + " could not map it";
    const std::string refusal = segment_refusal(fd, m.bytes);
    const int reserved = refusal.empty() ? reserve_own_pages(fd, rank, size, sizes.segment) : 0;
    if (refusal.empty() && reserved == 0) m.base = ::mmap(nullptr, m.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (!refusal.empty()) return me + " refused segment " + name + ": " + refusal;
    if (reserved != 0) {
        const std::string why = me + " could not reserve its part of the segment in /dev/shm (" +
                                std::strerror(reserved) + "; " + dev_shm_room() + ")";
        std::fprintf(stderr, "[ccl_core] shared-memory path off for this group: %s; its ops go through oneCCL. "
                     "Give /dev/shm more room (docker run --shm-size=1g) for full speed.\n", why.c_str());
        return why;
    }
    if (m.base != MAP_FAILED && static_cast<SegmentHeader*>(m.base)->token != token) {
        ::munmap(m.base, m.bytes);  // another /dev/shm (a container sharing hostname and kernel)
        m.base = MAP_FAILED;
    }
    return m.base == MAP_FAILED ? me + " could not map it" : "";
}

// Every other rank: takes the offered segment if it can, reports, and reads the verdict.
Mapping take_segment(Store& store, int rank, int size, Sizes& sizes, Milliseconds timeout) {
    std::istringstream offered(text(store.get("ccl_core/shm/name", timeout)));
    std::string name;
    std::uint64_t token = 0;
    offered >> name >> token >> sizes.segment >> sizes.small >> sizes.small_bf16;
    if (!offered) name.clear();
    Mapping m;
    const std::string refusal = map_offered(rank, size, name, token, sizes, m);
    store.set("ccl_core/shm/mapped/" + std::to_string(rank), text(refusal.empty() ? kOk : refusal));
    m.status = text(store.get("ccl_core/shm/status", timeout));
    return m;
}

}  // namespace

std::unique_ptr<ShmCollectives> ShmCollectives::create(Store& store, int rank, int size, int threads,
                                                     Milliseconds timeout, std::string& agreed) {
    if (size < 2) {
        agreed = "off: a group of one rank";
        return nullptr;
    }
    Sizes sizes = sizes_from_settings(size, threads);
    Mapping m = rank == 0 ? offer_segment(store, size, sizes, timeout) : take_segment(store, rank, size, sizes, timeout);
    agreed = m.status == kOk ? "on" : "off: " + m.status;
    if (m.status != kOk) {
        if (m.base != MAP_FAILED) ::munmap(m.base, m.bytes);
        return nullptr;  // every rank read the same verdict: all fall back to oneCCL together
    }
    return std::unique_ptr<ShmCollectives>(new ShmCollectives(rank, size, m.base, m.bytes, sizes.segment, sizes.small,
                                                               sizes.small_bf16));
}

ShmCollectives::ShmCollectives(int rank, int size, void* base, std::size_t bytes, std::size_t segment_bytes,
                           std::size_t small_limit, std::size_t small_limit_bf16)
    : rank_(rank), size_(size), base_(static_cast<char*>(base)), bytes_(bytes), segment_bytes_(segment_bytes),
      small_limit_(small_limit), small_limit_bf16_(small_limit_bf16) {
    header(rank_)->pid = static_cast<std::int32_t>(::getpid());
    pool_ = RegisteredPool::create(segment_header()->token, &header(rank_)->retired);
}

std::shared_ptr<RegisteredPool::Block> ShmCollectives::allocate(std::size_t bytes) { return pool_->allocate(bytes); }

std::shared_ptr<char> ShmCollectives::map_peer_block(int p, std::uint64_t serial, std::size_t need) const {
    return pool_->map_peer_block(p, header(p)->pid, serial, need);
}

ShmCollectives::~ShmCollectives() { ::munmap(base_, bytes_); }

SegmentHeader* ShmCollectives::segment_header() const { return reinterpret_cast<SegmentHeader*>(base_); }

// Counter first, then the check for sleepers, then (only if any) the generation and the wake, all sequentially
// consistent: a rank that registered as a sleeper either sees the new counter when it re-checks, or is woken.
void ShmCollectives::publish(std::uint64_t& counter, std::uint64_t seq) {
    note_my_core();
    __atomic_store_n(&counter, seq, __ATOMIC_SEQ_CST);
    SegmentHeader* h = segment_header();
    // With nobody asleep the shared line is only read: every rank bumping it on every publish made it bounce
    // between all cores (P read-modify-writes per step). A sleeper that registers after this read sees the counter
    // when it re-checks (sleep_unless); one registered before it has read an older generation and is woken.
    if (__atomic_load_n(&h->sleepers, __ATOMIC_SEQ_CST) == 0) return;
    __atomic_add_fetch(&h->generation, 1, __ATOMIC_SEQ_CST);
    ::syscall(SYS_futex, &h->generation, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void ShmCollectives::sleep_unless(const std::function<bool()>& ready, std::chrono::microseconds limit) {
    SegmentHeader* h = segment_header();
    const std::uint32_t seen = __atomic_load_n(&h->generation, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&h->sleepers, 1, __ATOMIC_SEQ_CST);
    struct Leave {
        std::uint32_t* sleepers;
        ~Leave() { __atomic_sub_fetch(sleepers, 1, __ATOMIC_SEQ_CST); }
    } leave{&h->sleepers};
    if (ready()) return;
    timespec t{static_cast<time_t>(limit.count() / 1000000), static_cast<long>(limit.count() % 1000000) * 1000};
    ::syscall(SYS_futex, &h->generation, FUTEX_WAIT, seen, &t, nullptr, 0);
}

// Called on every poll of a wait: the line is written only when the cpu changed (a write would pull it away from the
// peers that read it when they wait).
void ShmCollectives::note_my_core() {
    std::int32_t& core = header(rank_)->core;
    const int cpu = ::sched_getcpu();
    if (__atomic_load_n(&core, __ATOMIC_RELAXED) != cpu) __atomic_store_n(&core, cpu, __ATOMIC_RELAXED);
}

bool ShmCollectives::peer_on_my_core() const {
    const int mine = ::sched_getcpu();
    for (int p = 0; p < size_; ++p) {
        if (p != rank_ && __atomic_load_n(&header(p)->core, __ATOMIC_RELAXED) == mine) return true;
    }
    return false;
}

RankHeader* ShmCollectives::header(int rank) const {
    return reinterpret_cast<RankHeader*>(base_ + kRankHeadersAt) + rank;
}

char* ShmCollectives::slot(int half, int rank) const {
    return base_ + data_offset(size_) + segment_bytes_ * static_cast<std::size_t>(half * size_ + rank);
}

char* ShmCollectives::result(int half) const { return slot(0, 0) + segment_bytes_ * static_cast<std::size_t>(2 * size_ + half); }

std::shared_ptr<ShmCollectives::Op> ShmCollectives::start(Kind kind, const void* send, void* recv, std::size_t count,
                                                          DType dtype, ReduceOp op, int root,
                                                          std::shared_ptr<const Runs> runs) {
    if (runs) {
        bool fits = (kind == Kind::allgather || kind == Kind::reduce_scatter) && runs->run > 0 &&
                    runs->offsets.size() == static_cast<std::size_t>(size_);
        for (const auto& block : runs->offsets) fits = fits && block.size() * runs->run == count;
        if (!fits) throw InvalidArgument("shared-memory path: a block layout that does not match the op");
    }
    auto o = std::make_shared<Op>();
    o->kind = kind;
    o->runs = std::move(runs);
    if (!o->runs && count > 0) {  // registered buffers can be read in place (see announce)
        const std::size_t e = dtype_size(dtype);
        const std::size_t in = kind == Kind::allgather ? count : kind == Kind::reduce_scatter ? count * size_ : count;
        const std::size_t out = kind == Kind::allgather ? count * size_ : count;
        if (send) o->send_block = pool_->find(send, in * e, o->send_at);
        if (recv) o->recv_block = pool_->find(recv, out * e, o->recv_at);
    }
    o->root = root;
    o->send = static_cast<const char*>(send);
    o->recv = static_cast<char*>(recv);
    o->count = count;
    o->dtype = dtype;
    o->op = op;
    o->element = dtype_size(dtype);
    o->small = kind == Kind::allreduce && count * o->element <= (dtype == DType::bfloat16 ? small_limit_bf16_ : small_limit_);
    const std::size_t out_bytes = (kind == Kind::allgather ? count * static_cast<std::size_t>(size_) : count) * o->element;
    o->out = out_bytes >= kStreamingBytes ? Destination::not_read_soon : Destination::read_soon;
    // reduce_scatter places a piece for every rank in its slot per segment; the others one piece
    o->per_segment = segment_bytes_ / o->element / (kind == Kind::reduce_scatter ? static_cast<std::size_t>(size_) : 1);
    if (o->per_segment == 0) throw Unsupported("shared-memory segments too small for this group");
    // At least one segment even for count 0, so that the ranks still compare what they were asked to do.
    o->segments = std::max<std::size_t>(1, (count + o->per_segment - 1) / o->per_segment);
    std::lock_guard<std::mutex> lock(mutex_);
    o->first_seq = next_seq_;
    next_seq_ += o->segments;
    queue_.push_back(o);
    pending_.fetch_add(1);
    return o;  // the first test() or wait() places the input (and reports a disagreement as that call's error)
}

bool ShmCollectives::fits(Kind kind, DType dtype) const {
    return segment_bytes_ / dtype_size(dtype) / (kind == Kind::reduce_scatter ? static_cast<std::size_t>(size_) : 1) > 0;
}

void ShmCollectives::drive() {
    if (pending_.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    advance_queue();
}

bool ShmCollectives::progress(Op& op) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!op.done) advance_queue();
    return op.done;
}

void ShmCollectives::advance_queue() {
    while (!queue_.empty()) {
        Op& front = *queue_.front();
        if (!advance(front)) return;
        front.done = true;
        queue_.pop_front();
        pending_.fetch_sub(1);
    }
}

namespace {

using Kind = ShmCollectives::Kind;

// A kind as a peer described it in the segment: only the values of Kind mean something.
const char* kind_name(std::int32_t kind) {
    switch (kind) {
        case static_cast<std::int32_t>(Kind::allreduce): return "allreduce";
        case static_cast<std::int32_t>(Kind::allgather): return "allgather";
        case static_cast<std::int32_t>(Kind::reduce_scatter): return "reduce_scatter";
        case static_cast<std::int32_t>(Kind::broadcast): return "broadcast";
        default: return "an unknown collective";
    }
}

std::string what_was_passed(std::int32_t kind, std::uint64_t count, DType dtype, ReduceOp op, int root) {
    std::string s = std::string(kind_name(kind)) + " of " + std::to_string(count) + " " + dtype_name(dtype) + " elements";
    if (kind == static_cast<std::int32_t>(Kind::allreduce) || kind == static_cast<std::int32_t>(Kind::reduce_scatter)) {
        s += std::string(" with ") + reduce_op_name(op);
    }
    if (kind == static_cast<std::int32_t>(Kind::broadcast)) s += " from root " + std::to_string(root);
    return s;
}

}  // namespace

void ShmCollectives::check_agreement(const Op& o, std::uint64_t seq) const {
    const int half = static_cast<int>(seq & 1);
    const auto kind = static_cast<std::int32_t>(o.kind);
    std::string mismatch;
    for (int p = 0; p < size_; ++p) {
        const OpDescription& d = header(p)->described[half];
        if (d.seq == seq && d.count == o.count && d.dtype == static_cast<std::int32_t>(o.dtype) && d.kind == kind &&
            d.op == static_cast<std::int32_t>(o.op) && d.root == o.root) {
            continue;
        }
        mismatch += (mismatch.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p) + " called ";
        if (d.seq != seq) {
            mismatch += "a different number of earlier collectives or segments";
        } else {
            mismatch += what_was_passed(d.kind, d.count, static_cast<DType>(d.dtype), static_cast<ReduceOp>(d.op), d.root);
        }
    }
    if (!mismatch.empty()) {
        throw InvalidArgument(std::string(kind_name(kind)) + ": the ranks disagree on the collective: rank " +
                              std::to_string(rank_) + " called " +
                              what_was_passed(kind, o.count, o.dtype, o.op, o.root) + "; " + mismatch);
    }
}

ShmCollectives::Piece ShmCollectives::piece_of(const Op& o) const {
    const std::uint64_t seq = o.first_seq + o.segment;
    const std::size_t first = o.segment * o.per_segment;
    return {seq, static_cast<int>(seq & 1), first, std::min(o.per_segment, o.count - std::min(o.count, first))};
}

// Once every rank described the op: whether they all describe the same one (else InvalidArgument, on every rank,
// since each reads the same descriptions). Every rank describes an op before it places anything, so a rank that
// disagrees is found before anyone waits for its input.
bool ShmCollectives::agree(Op& o) const {
    if (o.agreed) return true;
    if (!everyone_reached(&RankHeader::announced, o.first_seq)) return false;
    check_agreement(o, o.first_seq);
    o.agreed = true;
    return true;
}

namespace {

// Which of this rank's buffers of the op lie in registered memory (kSendRegistered | kRecvRegistered).
std::uint32_t registered_buffers(const ShmCollectives::Op& o) {
    return (o.send_block ? kSendRegistered : 0) | (o.recv_block ? kRecvRegistered : 0);
}

}  // namespace

void ShmCollectives::announce(Op& o) {
    const std::uint32_t registered = registered_buffers(o);
    header(rank_)->described[o.first_seq & 1] = {o.first_seq, o.count, static_cast<std::int32_t>(o.dtype),
                                                 static_cast<std::int32_t>(o.op), static_cast<std::int32_t>(o.kind),
                                                 o.root, registered, 0, o.send_at, o.recv_at};
    publish(header(rank_)->announced, o.first_seq);
    o.announced = true;
}

namespace {

// What an op needs registered on a rank to be read in place: peers read its input (allgather, reduce_scatter,
// the root's buffer of broadcast), and for allreduce also its output (the reduced shares are gathered from it).
bool allows_in_place(Kind kind, std::uint32_t registered, bool is_root) {
    switch (kind) {
        case Kind::allreduce: return (registered & (kSendRegistered | kRecvRegistered)) == (kSendRegistered | kRecvRegistered);
        case Kind::allgather:
        case Kind::reduce_scatter: return (registered & kSendRegistered) != 0;
        case Kind::broadcast: return !is_root || (registered & kSendRegistered) != 0;
    }
    return false;
}

}  // namespace

bool ShmCollectives::in_place_here(const Op& o) const {
    // A small allreduce stays on the slots: one synchronisation there against three in place (described, reduced,
    // released), which costs more than copying up to 64 KiB saves. Every rank decides alike (count and dtype agree).
    if (o.runs || o.count == 0 || o.small) return false;
    return allows_in_place(o.kind, registered_buffers(o), rank_ == o.root);
}

bool ShmCollectives::in_place_everywhere(const Op& o) const {
    const int half = static_cast<int>(o.first_seq & 1);
    for (int p = 0; p < size_; ++p) {
        if (!allows_in_place(o.kind, header(p)->described[half].registered, p == o.root)) return false;
    }
    return true;
}

// This rank's input for `seq` is in place: publish the arrival (its description went out with announce()).
void ShmCollectives::arrive(std::uint64_t seq) {
    publish(header(rank_)->arrived, seq);
}

char* ShmCollectives::peer_output(const Op& o, int p, std::size_t bytes) {
    return const_cast<char*>(peer_buffer(o, p, false, bytes));  // peers' blocks are mapped writable (registered_pool)
}

const char* ShmCollectives::peer_buffer(const Op& o, int p, bool send, std::size_t bytes) {
    if (p == rank_) return send ? o.send : o.recv;
    const OpDescription& d = header(p)->described[o.first_seq & 1];
    const RegisteredPool::Where& at = send ? d.send_at : d.recv_at;
    const char* base = pool_->peer_block(p, header(p)->pid, at.serial, at.offset + bytes);
    return base + at.offset;
}

// Every rank's buffers are registered: each reads what it needs straight from its peers' buffers (no slots, no
// segments), then says it is through ("released"), and the op completes once every rank is: until then a peer may
// still read this rank's buffers, so they must not change. allreduce reduces its own share out of every rank's input
// and stores it into every rank's output (push): each rank reads N bytes and writes N, the memory floor's traffic,
// with one synchronisation after the descriptions. Region `share` of a rank's input is read by the share's owner
// alone, so the owner may overwrite it (in place, input and output are one buffer) once it reduced it. The reductions
// take the same sources in the same order, with the same kernels, as the copying path: the same bits.
bool ShmCollectives::advance_in_place(Op& o) {
    const std::uint64_t seq = o.first_seq;
    const std::size_t e = o.element;
    if (o.in_place_step == Op::InPlaceStep::read) {
        for (int p = 0; p < size_; ++p) {  // what peers retired since (their serials are never reused)
            if (p != rank_) pool_->forget_retired(p, header(p)->retired);
        }
        if (o.kind == Kind::allgather) {
            for (int p = 0; p < size_; ++p) {
                char* to = o.recv + static_cast<std::size_t>(p) * o.count * e;
                const char* from = peer_buffer(o, p, true, o.count * e);
                if (from != to) parallel_copy(to, from, o.count * e, o.out);
            }
        } else if (o.kind == Kind::reduce_scatter) {
            std::vector<const void*> sources(static_cast<std::size_t>(size_));
            const std::size_t mine = static_cast<std::size_t>(rank_) * o.count * e;
            for (int p = 0; p < size_; ++p) {
                sources[static_cast<std::size_t>(p)] = peer_buffer(o, p, true, mine + o.count * e) + mine;
            }
            parallel_reduce(sources.data(), size_, o.recv, nullptr, o.count, o.dtype, o.op);
        } else if (o.kind == Kind::broadcast) {
            if (rank_ != o.root) parallel_copy(o.recv, peer_buffer(o, o.root, true, o.count * e), o.count * e, o.out);
        } else {  // allreduce: this rank's share, out of every rank's input, into every rank's output
            const Share mine = share_of(o.count, e, size_, rank_);
            const std::size_t begin = mine.begin * e, bytes = mine.length * e;
            std::vector<const void*> sources(static_cast<std::size_t>(size_));
            for (int p = 0; p < size_; ++p) {
                sources[static_cast<std::size_t>(p)] = peer_buffer(o, p, true, begin + bytes) + begin;
            }
            parallel_reduce(sources.data(), size_, o.recv + begin, nullptr, mine.length, o.dtype, o.op);
            for (int p = 0; p < size_; ++p) {
                if (p != rank_) parallel_copy(peer_output(o, p, begin + bytes) + begin, o.recv + begin, bytes, o.out);
            }
        }
        publish(header(rank_)->released, seq);
        o.in_place_step = Op::InPlaceStep::drain;
    }
    if (!everyone_reached(&RankHeader::released, seq)) return false;
    o.segment = o.segments;
    o.send_block.reset();  // peers are through with them
    o.recv_block.reset();
    return true;
}

bool ShmCollectives::everyone_reached(std::uint64_t RankHeader::*counter, std::uint64_t seq) const {
    for (int p = 0; p < size_; ++p) {
        if (load(header(p)->*counter) < seq) return false;
    }
    return true;
}

namespace {

// Elements [first, first + n) of a block made of runs (Runs), piece by piece: piece(where the piece starts in the
// block, how many elements came before it, its length), all in elements.
template <class Piece>
void for_each_piece_of_runs(const std::vector<std::size_t>& offsets, std::size_t run, std::size_t first,
                            std::size_t n, Piece piece) {
    for (std::size_t done = 0; done < n;) {
        const std::size_t at = first + done, within = at % run, take = std::min(n - done, run - within);
        piece(offsets[at / run] + within, done, take);
        done += take;
    }
}

}  // namespace

// allgather, reduce_scatter and broadcast: per segment, every rank places what the others need in its slot, and once
// all have arrived every rank takes what it needs from the slots. One synchronisation per segment.
bool ShmCollectives::advance_placed(Op& o) {
    const std::size_t e = o.element;
    while (o.segment < o.segments) {
        const auto [seq, half, first, n] = piece_of(o);
        if (o.copy_step == Op::CopyStep::place) {
            char* mine = slot(half, rank_);
            if (o.kind == Kind::allgather) {
                parallel_copy(mine, o.send + first * e, n * e);
            } else if (o.kind == Kind::broadcast) {
                if (rank_ == o.root) parallel_copy(mine, o.send + first * e, n * e);
            } else {  // reduce_scatter: this segment of every rank's block, block p at p * n
                for (int p = 0; p < size_; ++p) {
                    char* to = mine + static_cast<std::size_t>(p) * n * e;
                    if (o.runs) {
                        for_each_piece_of_runs(o.runs->offsets[static_cast<std::size_t>(p)], o.runs->run, first, n,
                                               [&](std::size_t at, std::size_t done, std::size_t take) {
                                                   std::memcpy(to + done * e, o.send + at * e, take * e);
                                               });
                    } else {
                        parallel_copy(to, o.send + (static_cast<std::size_t>(p) * o.count + first) * e, n * e);
                    }
                }
            }
            arrive(seq);
            o.copy_step = Op::CopyStep::combine;
        }
        if (!agree(o)) return false;
        if (!everyone_reached(&RankHeader::arrived, seq)) return false;
        if (o.kind == Kind::allgather) {
            for (int p = 0; p < size_; ++p) {
                if (o.runs) {
                    const char* from = slot(half, p);
                    for_each_piece_of_runs(o.runs->offsets[static_cast<std::size_t>(p)], o.runs->run, first, n,
                                           [&](std::size_t at, std::size_t done, std::size_t take) {
                                               std::memcpy(o.recv + at * e, from + done * e, take * e);
                                           });
                } else {
                    parallel_copy(o.recv + (static_cast<std::size_t>(p) * o.count + first) * e, slot(half, p), n * e, o.out);
                }
            }
        } else if (o.kind == Kind::broadcast) {
            if (rank_ != o.root) parallel_copy(o.recv + first * e, slot(half, o.root), n * e, o.out);
        } else {
            std::vector<const void*> sources(static_cast<std::size_t>(size_));
            for (int p = 0; p < size_; ++p) {
                sources[static_cast<std::size_t>(p)] = slot(half, p) + static_cast<std::size_t>(rank_) * n * e;
            }
            parallel_reduce(sources.data(), size_, o.recv + first * e, nullptr, n, o.dtype, o.op);
        }
        o.copy_step = Op::CopyStep::place;
        ++o.segment;
    }
    return true;
}

bool ShmCollectives::advance(Op& o) {
    if (o.path == Op::Path::undecided) {
        if (!o.announced) announce(o);
        if (!in_place_here(o)) {
            o.path = Op::Path::copy;  // the others learn it from this rank's description
        } else {
            if (!agree(o)) return false;
            o.path = in_place_everywhere(o) ? Op::Path::in_place : Op::Path::copy;
            if (o.path == Op::Path::in_place) in_place_ops_.fetch_add(1, std::memory_order_relaxed);
        }
    }
    if (o.path == Op::Path::in_place) return advance_in_place(o);
    if (o.kind != Kind::allreduce) return advance_placed(o);
    return advance_copied_allreduce(o);
}

// allreduce through the slots, per segment: a small one reduces every slot on every rank (one synchronisation); a
// large one reduces this rank's share into its output and the result area, then collects the others' shares.
bool ShmCollectives::advance_copied_allreduce(Op& o) {
    while (o.segment < o.segments) {
        const auto [seq, half, first, n] = piece_of(o);
        const std::size_t offset = first * o.element;
        const Share mine = share_of(n, o.element, size_, rank_);

        if (o.copy_step == Op::CopyStep::place) {  // place this rank's input where the others read it
            char* my_slot = slot(half, rank_);
            if (o.small) {
                std::memcpy(my_slot, o.send + offset, n * o.element);
            } else {  // everything except the share this rank reduces itself
                parallel_copy(my_slot, o.send + offset, mine.begin * o.element);
                const std::size_t after = mine.begin + mine.length;
                parallel_copy(my_slot + after * o.element, o.send + offset + after * o.element, (n - after) * o.element);
            }
            arrive(seq);
            o.copy_step = Op::CopyStep::combine;
        }
        if (o.copy_step == Op::CopyStep::combine) {  // reduce once every rank's input is in place
            if (!agree(o)) return false;
            if (!everyone_reached(&RankHeader::arrived, seq)) return false;
            std::vector<const void*> sources(static_cast<std::size_t>(size_));
            if (o.small) {
                for (int p = 0; p < size_; ++p) sources[static_cast<std::size_t>(p)] = slot(half, p);
                reduce_sources(sources.data(), size_, o.recv + offset, nullptr, n, o.dtype, o.op);
                o.copy_step = Op::CopyStep::place;
                ++o.segment;
                continue;
            }
            const std::size_t at = mine.begin * o.element;
            for (int p = 0; p < size_; ++p) {
                sources[static_cast<std::size_t>(p)] = p == rank_ ? o.send + offset + at : slot(half, p) + at;
            }
            parallel_reduce(sources.data(), size_, o.recv + offset + at, result(half) + at, mine.length, o.dtype, o.op);
            publish(header(rank_)->reduced, seq);
            o.copy_step = Op::CopyStep::collect;
        }
        if (o.copy_step == Op::CopyStep::collect) {  // collect the others' shares of the result
            if (!everyone_reached(&RankHeader::reduced, seq)) return false;
            for (int p = 0; p < size_; ++p) {
                if (p == rank_) continue;
                const Share theirs = share_of(n, o.element, size_, p);
                parallel_copy(o.recv + offset + theirs.begin * o.element, result(half) + theirs.begin * o.element,
                            theirs.length * o.element, o.out);
            }
            o.copy_step = Op::CopyStep::place;
            ++o.segment;
        }
    }
    return true;
}

}  // namespace ccl_core::detail
