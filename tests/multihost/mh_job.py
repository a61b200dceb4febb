"""The job each rank runs in the multi-host tests: every op suite, DDP against gloo, sub-groups across and
inside hosts, and interface byte counters that show which transport carried the traffic."""
import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "torch")]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import op_workers  # noqa: E402
import training_workers  # noqa: E402
from ccl_bench.cli import flat_ccl_group  # noqa: E402


def wildcard_listeners():
    """Listening TCP sockets of this host (network namespace) bound to every address (0.0.0.0 or ::)."""
    count = 0
    for table, wildcard in (("/proc/net/tcp", "00000000"), ("/proc/net/tcp6", "0" * 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            count += state == "0A" and local.split(":")[0] == wildcard
    return count


def counters(iface):
    def read(i, what):
        return int(Path(f"/sys/class/net/{i}/statistics/{what}").read_text())
    return {"veth": read(iface, "tx_bytes") + read(iface, "rx_bytes"), "lo": read("lo", "tx_bytes")}


def traffic_of_allreduce(group, iface, nbytes):
    """Bytes over the veth and loopback on this host during one allreduce of nbytes in `group`
    (everything else is quiet: all ranks wait at barriers on both sides; theirs add some hundred bytes)."""
    t = torch.ones(nbytes // 4)
    dist.barrier()
    before = counters(iface)
    # no rank starts before every rank has read its counters: the other rank of this host would otherwise send part
    # of its share before this one looks (seen: 2 MB short of the 32 MiB under load)
    dist.barrier()
    if group is not None:
        dist.all_reduce(t, group=group)
    dist.barrier()
    after = counters(iface)
    return {k: after[k] - before[k] for k in before}


def link_interface():
    """This host's interface on the link between the test hosts (169.254.77.0/24). Found here, not passed in:
    mpiexec copies the launching host's environment to every rank."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields[3].startswith("169.254.77."):
            return fields[1]
    raise RuntimeError(f"no interface on the test link:\n{out}")


def float_sums_agree(rank, size, n=(1 << 18) + 1):
    """A float32 allreduce of random values (an odd count: the tail path too): (every rank holds the same bits, the
    largest distance from the float64 sum)."""
    t = torch.randn(n, generator=torch.Generator().manual_seed(rank))
    want = sum(torch.randn(n, generator=torch.Generator().manual_seed(r)).double() for r in range(size))
    dist.all_reduce(t)
    digest = torch.tensor([int(hashlib.sha1(t.numpy().tobytes()).hexdigest()[:15], 16)])
    digests = [torch.zeros_like(digest) for _ in range(size)]
    dist.all_gather(digests, digest)
    return len({d.item() for d in digests}) == 1, (t.double() - want).abs().max().item()


iface = link_interface()
os.environ["GLOO_SOCKET_IFNAME"] = iface  # gloo (the comparison backend) would resolve the hostname instead
dist.init_process_group("ccl")
rank, size = dist.get_rank(), dist.get_world_size()
local = int(os.environ["LOCAL_WORLD_SIZE"])  # only to lay out the test's groups; ccl-core never reads it
result = {"host": socket.gethostname(), "problems": [], "wildcard_listeners": wildcard_listeners(),
          "hierarchy": dist.group.WORLD._get_backend(torch.device("cpu")).hierarchy}
for worker in op_workers.ALL_WORKERS:
    result["problems"] += [f"{worker.__name__}: {p}" for p in worker(rank, size)]
result["float_bits_agree"], result["float_error"] = float_sums_agree(rank, size)
diff, agree = training_workers.ddp_matches_gloo(rank, size, False)
result["ddp_max_diff"], result["ddp_ranks_agree"] = diff, agree

# sub-groups: one that spans the hosts, and (with 2 ranks per host) one inside each host
cross = dist.new_group([0, size - 1])
locals_ = [None] * size
dist.all_gather_object(locals_, local)
uneven = len(set(locals_)) > 1  # hosts of different rank counts (2 and 1, say): no groups inside hosts
inside = [dist.new_group(list(range(h * local, (h + 1) * local))) for h in range(size // local)] \
    if local > 1 and not uneven else []
x = torch.tensor([rank + 1.0])
if rank in (0, size - 1):
    dist.all_reduce(x, group=cross)
    result["cross_sum"] = x.item()
for g_index, g in enumerate(inside):
    if rank // local == g_index:
        y = torch.tensor([rank + 1.0])
        dist.all_reduce(y, group=g)
        result["inside_sum"] = y.item()

def shm_path(group):
    return group is not None and group.rank() >= 0 and \
        group._get_backend(torch.device("cpu")).shared_memory


result["world_shm"] = shm_path(dist.group.WORLD)
result["cross_shm"] = shm_path(cross) if rank in (0, size - 1) else None
result["inside_shm"] = shm_path(inside[rank // local]) if inside else None
nbytes = 16 << 20
result["cross_traffic"] = traffic_of_allreduce(cross if rank in (0, size - 1) else None, iface, nbytes)
# the whole group, hierarchical (when on) and flat: bytes over this host's end of the link for one allreduce
result["world_traffic"] = traffic_of_allreduce(dist.group.WORLD, iface, nbytes)
flat = flat_ccl_group()
result["flat_traffic"] = traffic_of_allreduce(flat, iface, nbytes)
if inside:
    result["inside_traffic"] = traffic_of_allreduce(inside[rank // local], iface, nbytes)
Path(os.environ["CCL_TEST_OUT"], f"rank{rank}.json").write_text(json.dumps(result))
dist.destroy_process_group()
