"""ccl-doctor on two netns hosts x 2 ranks under torchrun: a healthy set-up passes (exit 0 on every host), and
faults planted on one host are each found on that host, with their fix, and fail the run (exit 1 on every host):
a 1 MiB /dev/shm, OMP threads above the cores, another ccl-torch release, an interface that reaches nothing, two
ranks pinned to one core. And on 4 hosts of 2, 1, 2 and 2 ranks, a healthy job passes."""
import json
import os
import re
import shutil
from pathlib import Path

import pytest

import netns_hosts
from ccl_core import free_port
from ranks import clean_env

why_not = netns_hosts.can_make_namespaces()
pytestmark = pytest.mark.skipif(bool(why_not), reason=why_not)


@pytest.fixture(scope="module")
def hosts():
    made = netns_hosts.create(str(os.getpid() % 10000 + 1))
    yield made
    netns_hosts.destroy(made)


def doctor(hosts, tmp_path, host_env=(), preludes=(), nproc=2):
    """Runs ccl-doctor on every host (nproc ranks each, or nproc[i] on host i; host i gets host_env[i] and runs
    preludes[i] first, where given); returns (rank 0's report, what it gathered and found, each host's exit code)."""
    env = dict(clean_env(), OMP_NUM_THREADS="1")
    report_file = tmp_path / "doctor.json"
    outs = netns_hosts.torchrun_on_hosts(hosts, ["-m", "ccl_doctor"], nproc, env, port=free_port(), timeout=240,
                                         args=["--timeout", "30", "--json", str(report_file)],
                                         host_env=list(host_env), preludes=list(preludes))
    report = outs[0][1]
    print(report)
    assert report_file.exists(), f"{report}\n{outs[0][2][-3000:]}\n{outs[1][2][-3000:]}"
    return report, json.loads(report_file.read_text()), [code for code, _, _ in outs]


def section(report: str, host: str) -> str:
    """The lines of the report about `host`."""
    return re.search(rf"^host {host}:.*?(?=^\S|\Z)", report, re.M | re.S).group(0)


def problems(found: dict) -> list[dict]:
    return [f for f in found["findings"] if f["problem"]]


def test_a_healthy_job_passes(hosts, tmp_path):
    report, found, codes = doctor(hosts, tmp_path)
    assert codes == [0, 0], report
    assert problems(found) == [] and report.rstrip().endswith("ccl-doctor: no problems found")
    assert "ccl-doctor: 4 ranks on 2 hosts, started by torchrun" in report
    for i, h in enumerate(hosts):
        text = section(report, h.hostname)
        other = hosts[1 - i].hostname
        assert f"interface  {h.interface} {h.address} (route to MASTER_ADDR {hosts[0].address})" in text, text
        assert f"oneCCL listens on {h.address}" in text, text  # what oneCCL really opened: the link, not the stray
        assert f"reaches    {other} yes" in text and f"TCP stream to {other}" in text
        assert "ccl-core's shared-memory path: on" in text and "all_reduce 16.0 MiB inside" in text
    assert "hierarchy on: 2 hosts x 2 ranks; all_reduce right on 4 of 4 ranks" in report
    assert "among the hosts' first ranks" in report
    # the netns hosts share this machine's boot id: said, as a note only
    assert "hosts cclhost0, cclhost1 are one machine" in report


def test_a_small_dev_shm_and_too_many_threads_are_found_where_they_are(hosts, tmp_path):
    report, found, codes = doctor(hosts, tmp_path, host_env=({"OMP_NUM_THREADS": "4"}, {}),
                                  preludes=("", "mount -t tmpfs -o size=1m tmpfs /dev/shm"))
    assert codes == [1, 1], report
    where = sorted((f["where"], f["what"].split(":")[0]) for f in problems(found))
    assert where == [("cclhost0", "oversubscribed"), ("cclhost1", "/dev/shm has 1.0 MiB free of 1.0 MiB"),
                     ("job", "ranks 0-3")], where
    host0, host1 = section(report, "cclhost0"), section(report, "cclhost1")
    assert "oversubscribed: 2 ranks x 4 threads = 8 threads on 2 cores (OMP_NUM_THREADS=4" in host0
    assert "fix: OMP_NUM_THREADS=1" in host0
    assert "too little for the shared-memory path" in host1 and "--shm-size" in host1, host1
    # ccl-core turns oneCCL's shm transport off on the small host only; oneCCL cannot mix the two, and the group
    # says so on every rank instead of dying inside oneCCL
    assert "ranks 0-3: the ccl group failed:" in report and "needs the same CCL_ATL_SHM on every rank" in report
    assert "CCL_ATL_SHM=0 on rank(s) 2, 3, CCL_ATL_SHM=1 on rank(s) 0, 1" in report
    assert report.rstrip().endswith("ccl-doctor: 3 problems found")


def test_another_release_and_an_unreachable_interface_are_found(hosts, tmp_path):
    # host 1 imports another build of the bindings: the installed package, copied, with another version
    import oneccl_bindings_for_pytorch as installed

    other = tmp_path / "other-site" / "oneccl_bindings_for_pytorch"
    shutil.copytree(Path(installed.__file__).parent, other)
    info = other / "_build_info.py"
    info.write_text(info.read_text().replace(f'"{installed.__version__}"', '"3.0.0+other"'))
    stray = hosts[1].interface.replace("v", "x")  # the live interface of host 1 that reaches no other host
    report, found, codes = doctor(hosts, tmp_path,
                                  host_env=({}, {"PYTHONPATH": str(other.parent), "FI_TCP_IFACE": stray}),
                                  preludes=("taskset -p -c 0 $$ > /dev/null", ""))  # host 0: both ranks on core 0
    assert codes == [1, 1], report
    assert f"ccl-torch differs between ranks: {installed.__version__} on cclhost0 (ranks 0-1); 3.0.0+other on " \
           "cclhost1 (ranks 2-3)" in report
    host1 = section(report, "cclhost1")
    assert f"cclhost0 cannot reach cclhost1 on {stray} 169.254.88.2 (FI_TCP_IFACE)" in host1, host1
    assert "fix: oneCCL would hang creating the group: set FI_TCP_IFACE" in host1
    # no group is made across an unreachable interface, so nothing hangs: the run ends well within its timeout
    assert "group      not made: hosts do not reach each other (cclhost0 -> cclhost1" in report
    host0 = section(report, "cclhost0")
    assert "PROBLEM    2 ranks on 1 core" in host0, host0
    assert "ranks 0 and 1 are pinned to the same cores (0) while core 1 runs no rank" in host0
    assert [f["where"] for f in problems(found)] == ["job", "cclhost0", "cclhost0", "cclhost1"], problems(found)


def test_under_mpiexec_a_healthy_job_passes(hosts, tmp_path):
    import oneccl_bindings_for_pytorch

    script = Path(oneccl_bindings_for_pytorch.__file__).parent / "doctor.py"  # python -m ...doctor, as a file
    # Intel MPI pins each host's two ranks to cores 0 and 1 of the one machine both netns hosts share
    env = dict(clean_env(), OMP_NUM_THREADS="1", I_MPI_PIN="0")
    code, report, err = netns_hosts.mpiexec_on_hosts(hosts, script, 2, env, port=free_port(), timeout=240)
    print(report)
    assert code == 0, f"{report}\n{err[-3000:]}"
    assert "ccl-doctor: 4 ranks on 2 hosts, started by mpi (PMI)" in report
    assert "hierarchy on: 2 hosts x 2 ranks; all_reduce right on 4 of 4 ranks" in report
    assert report.rstrip().endswith("ccl-doctor: no problems found")


def test_four_hosts_of_different_sizes_pass(tmp_path):
    """4 hosts on a bridge with 2, 1, 2 and 2 ranks: every host reaches the other three, the group's allreduce goes
    through a leader per host and is right on every rank, and nothing is wrong (exit 0 on every host)."""
    four = netns_hosts.create(f"r{os.getpid() % 1000}", 4)
    try:
        report, found, codes = doctor(four, tmp_path, nproc=[2, 1, 2, 2])
    finally:
        netns_hosts.destroy(four)
    assert codes == [0, 0, 0, 0], report
    assert problems(found) == [] and report.rstrip().endswith("ccl-doctor: no problems found")
    assert "ccl-doctor: 7 ranks on 4 hosts, started by torchrun" in report
    for h in four:
        others = ", ".join(f"{o.hostname} yes" for o in four if o is not h)
        assert f"reaches    {others}" in section(report, h.hostname), section(report, h.hostname)
    assert ("hierarchy on: hosts of 2, 1, 2, 2 ranks, allreduce through a leader per host; "
            "all_reduce right on 7 of 7 ranks") in report
    assert "among the hosts' first ranks" in report

