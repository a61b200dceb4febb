"""Two "hosts" (network namespaces with their own hostnames) joined by a veth pair, each with a second live
interface that leads nowhere, ranks started by
`torchrun --nnodes 2`: every op and DDP give the same results as on one host, oneCCL carries traffic between
hosts over the network and inside a host over shared memory."""
import json
import os
from pathlib import Path

import pytest

import netns_hosts
import shaped_link
from ccl_core import free_port
from ranks import clean_env

JOB = Path(__file__).resolve().parent / "mh_job.py"
why_not = netns_hosts.can_make_namespaces()
pytestmark = pytest.mark.skipif(bool(why_not), reason=why_not)
MiB16 = 16 << 20


@pytest.fixture(scope="module")
def hosts():
    made = netns_hosts.create(str(os.getpid() % 10000))
    yield made
    netns_hosts.destroy(made)


def run_job(hosts, nproc, tmp_path, launcher="torchrun", **env_vars):
    env = dict(clean_env(), CCL_TEST_OUT=str(tmp_path), OMP_NUM_THREADS="1", **env_vars)
    ranks = sum(nproc) if isinstance(nproc, list) else len(hosts) * nproc
    if launcher == "torchrun":
        outs = netns_hosts.torchrun_on_hosts(hosts, JOB, nproc, env, port=free_port())
    else:
        outs = [netns_hosts.mpiexec_on_hosts(hosts, JOB, nproc, env, port=free_port())]
    for code, out, err in outs:
        assert code == 0, f"{out}\n{err[-4000:]}"
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(ranks)]


def link_bytes_of_a_ring_allreduce(hosts: int, nbytes: int) -> float:
    """What a host's end of the link carries (sent + received) when its ranks all-reduce nbytes with the ranks of
    the other hosts and no byte crosses twice: the shaped-link benchmark's limit, each way."""
    return 2 * shaped_link.crossing("all_reduce", [1] * hosts) * nbytes


def check_ops_and_training(results):
    for r in results:
        assert r["problems"] == [], r["problems"]
        assert r["ddp_max_diff"] < 1e-6 and r["ddp_ranks_agree"]
        assert r["float_bits_agree"] and r["float_error"] < 1e-4, r


def test_one_rank_per_host(hosts, tmp_path):
    results = run_job(hosts, 1, tmp_path)
    assert [r["host"] for r in results] == ["cclhost0", "cclhost1"]
    # host 1 runs only ranks: oneCCL's endpoints listen on the link's address, never on every address
    # (host 0 also runs torch's rendezvous store, which torch binds to all addresses)
    assert results[1]["wildcard_listeners"] == 0
    check_ops_and_training(results)
    for r in results:
        assert r["hierarchy"].startswith("off: hosts hold 1, 1 ranks")
        assert r["cross_sum"] == 3.0
        assert r["world_shm"] is False and r["cross_shm"] is False  # spans hosts: oneCCL carries allreduce
        # the 16 MiB allreduce between hosts went over the veth (both directions counted)
        assert r["cross_traffic"]["veth"] >= MiB16


@pytest.mark.parametrize("launcher", ["torchrun", "mpiexec"])
def test_two_ranks_per_host_with_groups_across_and_inside(hosts, tmp_path, launcher):
    """Under torchrun with CCL_CORE_HIERARCHY_MIN_BYTES=0, every op of the suite (11 elements: the tail path too)
    takes the hierarchical path; under mpiexec, only the messages from the default threshold up."""
    extra = {"CCL_CORE_HIERARCHY_MIN_BYTES": "0"} if launcher == "torchrun" else {}
    results = run_job(hosts, 2, tmp_path, launcher, **extra)
    assert [r["host"] for r in results] == ["cclhost0", "cclhost0", "cclhost1", "cclhost1"]
    check_ops_and_training(results)
    for rank, r in enumerate(results):
        assert r["hierarchy"] == "on: 2 hosts x 2 ranks"
        assert r["inside_sum"] == (3.0 if rank < 2 else 7.0)
        # inside a host: ccl-core's shared-memory allreduce, and neither the veth nor loopback carried the 16 MiB
        assert r["inside_shm"] is True and r["world_shm"] is False
        assert r["inside_traffic"]["veth"] < MiB16 // 16 and r["inside_traffic"]["lo"] < MiB16 // 16, r["inside_traffic"]
        # hierarchical: this host sends its half of the partial sum and of the result, and receives the other
        # half of each: 2 x 16 MiB over its end of the link (tx + rx), plus framing
        least = link_bytes_of_a_ring_allreduce(2, MiB16)
        assert least <= r["world_traffic"]["veth"] < 1.1 * least, (r["world_traffic"], r["flat_traffic"])
        print(f"rank {rank}: link bytes of a 16 MiB allreduce, hierarchical {r['world_traffic']['veth']}, "
              f"flat {r['flat_traffic']['veth']}")
    for rank in (0, 3):
        assert results[rank]["cross_sum"] == 5.0
        assert results[rank]["cross_shm"] is False
        assert results[rank]["cross_traffic"]["veth"] >= MiB16


def check_through_leaders(results, counts):
    """Hosts of unequal rank counts: allreduce through a leader per host (every op of the suite, with
    CCL_CORE_HIERARCHY_MIN_BYTES=0; the others flat), correct, and each host's link carrying what a
    bandwidth-optimal allreduce between the hosts must."""
    check_ops_and_training(results)
    least = link_bytes_of_a_ring_allreduce(len(counts), MiB16)
    for r in results:
        assert r["hierarchy"] == f"on: hosts of {', '.join(map(str, counts))} ranks, allreduce through a leader per host"
        assert least <= r["world_traffic"]["veth"] < 1.1 * least, (r["world_traffic"], r["flat_traffic"])


def test_hosts_of_two_and_one_ranks(hosts, tmp_path):
    results = run_job(hosts, [2, 1], tmp_path, CCL_CORE_HIERARCHY_MIN_BYTES="0")
    assert [r["host"] for r in results] == ["cclhost0", "cclhost0", "cclhost1"]
    check_through_leaders(results, [2, 1])


def test_a_lost_rank_ends_hierarchical_ops_within_the_timeout(hosts, tmp_path):
    env = dict(clean_env(), CCL_TEST_OUT=str(tmp_path), OMP_NUM_THREADS="1")
    job = Path(__file__).resolve().parent / "peer_lost_job.py"
    outs = netns_hosts.torchrun_on_hosts(hosts, job, 2, env, port=free_port(), timeout=120)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    for r in results:
        assert r["hierarchy"] == "on: 2 hosts x 2 ranks" and r["first"] == 4.0
        assert r["error"] is not None, outs
        # within the group's timeout (10 s) plus headroom for this VM's slow phases
        assert r["seconds"] < 10 + 5, r
    # rank 2 shares a host with the lost rank: it sees the death itself; the others wait out the timeout
    assert "rank 1 (pid" in results[2]["error"] or "died" in results[2]["error"], results[2]["error"]
    assert "did not complete within 10000 ms" in results[0]["error"], results[0]["error"]


@pytest.fixture(scope="module")
def four_hosts():
    """Four hosts on a bridge, as on one switch."""
    made = netns_hosts.create(f"q{os.getpid() % 1000}", 4)
    yield made
    netns_hosts.destroy(made)


@pytest.mark.parametrize("count", [3, 4])
def test_hosts_of_two_ranks_on_one_switch(four_hosts, tmp_path, count):
    """3 and 4 hosts x 2 ranks: every op hierarchical (CCL_CORE_HIERARCHY_MIN_BYTES=0), the same results as on one
    host, and each host's end of the link carries what a bandwidth-optimal allreduce between hosts must."""
    hosts = four_hosts[:count]
    results = run_job(hosts, 2, tmp_path, CCL_CORE_HIERARCHY_MIN_BYTES="0")
    assert [r["host"] for r in results] == [f"cclhost{h}" for h in range(count) for _ in range(2)]
    check_ops_and_training(results)
    least = link_bytes_of_a_ring_allreduce(count, MiB16)
    for rank, r in enumerate(results):
        assert r["hierarchy"] == f"on: {count} hosts x 2 ranks"
        assert r["inside_sum"] == 4 * (rank // 2) + 3.0
        assert r["inside_shm"] is True and r["world_shm"] is False
        assert least <= r["world_traffic"]["veth"] < 1.1 * least, (r["world_traffic"], r["flat_traffic"])
        print(f"rank {rank} of {count} hosts: link bytes of a 16 MiB allreduce, hierarchical "
              f"{r['world_traffic']['veth']} (least {least:.0f}), flat {r['flat_traffic']['veth']}")


def test_hosts_of_one_three_and_two_ranks(four_hosts, tmp_path):
    results = run_job(four_hosts[:3], [1, 3, 2], tmp_path, CCL_CORE_HIERARCHY_MIN_BYTES="0")
    assert [r["host"] for r in results] == ["cclhost0"] + ["cclhost1"] * 3 + ["cclhost2"] * 2
    check_through_leaders(results, [1, 3, 2])
