"""A real Slurm (Debian's slurm-wlm 22.05 and munge) on the two network-namespace hosts of the multi-host tests:
slurmctld and one slurmd on host 0, a slurmd on host 1, clients started on host 0. Installed with apt when missing;
everything started here is stopped and every file made here removed on exit. See ../shared/notes/slurm-here.md."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import netns_hosts

PACKAGES = ["slurm-wlm", "munge"]
MUNGE_KEY = Path("/etc/munge/munge.key")


def why_not() -> str:
    """'' when a cluster can be made here, else the reason."""
    reason = netns_hosts.can_make_namespaces()
    if reason:
        return reason
    if shutil.which("slurmctld") and shutil.which("munged"):
        return ""
    if not shutil.which("apt-get"):
        return "Slurm is not installed and there is no apt-get to install it"
    proc = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES],
                          env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), capture_output=True, text=True)
    if proc.returncode != 0:
        return f"apt-get install {' '.join(PACKAGES)} failed: {proc.stderr.strip()[-500:]}"
    return ""


def _config(workdir: Path, hosts) -> str:
    nodes = "".join(f"NodeName={h.hostname} NodeAddr={h.address} CPUs=2 State=UNKNOWN\n" for h in hosts)
    return f"""ClusterName=ccltest
SlurmctldHost={hosts[0].hostname}({hosts[0].address})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={workdir}/state
SlurmdSpoolDir={workdir}/spool/%n
SlurmctldPidFile={workdir}/slurmctld.pid
SlurmdPidFile={workdir}/slurmd-%n.pid
SlurmctldLogFile={workdir}/slurmctld.log
SlurmdLogFile={workdir}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
KillWait=5
MinJobAge=10
{nodes}PartitionName=ccl Nodes={",".join(h.hostname for h in hosts)} Default=YES MaxTime=INFINITE State=UP
"""


def start_on(host, argv: list[str], env: dict) -> subprocess.Popen:
    """argv on `host`, like netns_hosts.start, but entering only its network namespace: `ip netns exec` remounts
    /sys, which hides the cgroup filesystem that slurmd initialises even with cgroups unused. A private mount
    namespace gives the host its /etc/hosts, as `ip netns exec` does."""
    inner = f'mount --bind /etc/netns/{host.netns}/hosts /etc/hosts && hostname {host.hostname} && exec "$@"'
    return subprocess.Popen(["nsenter", f"--net=/run/netns/{host.netns}", "unshare", "--uts", "--mount",
                             "--propagation", "private", "bash", "-c", inner, "bash", *argv],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class SlurmCluster:
    def __init__(self, tag: str):
        self.tag = tag
        self.hosts = []
        self.daemons: list[subprocess.Popen] = []
        self.workdir = Path(tempfile.mkdtemp(prefix="ccl-slurm-"))
        self.conf = self.workdir / "slurm.conf"
        self.made_key = False
        self.munged_pid: int | None = None

    # -- munge: one daemon for all hosts (its socket is a path, reachable from every namespace) --
    def _start_munge(self):
        if not MUNGE_KEY.exists():
            MUNGE_KEY.parent.mkdir(mode=0o700, exist_ok=True)
            MUNGE_KEY.write_bytes(os.urandom(1024))
            shutil.chown(MUNGE_KEY, "munge", "munge")
            MUNGE_KEY.chmod(0o400)
            self.made_key = True
        if subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
            return  # a munged already serves this machine
        for d in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            Path(d).mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True, capture_output=True)
        self.munged_pid = int(Path("/run/munge/munged.pid").read_text())

    def env(self, base: dict) -> dict:
        return dict(base, SLURM_CONF=str(self.conf))

    def start(self):
        self._start_munge()
        self.hosts = netns_hosts.create(self.tag)
        (self.workdir / "state").mkdir()
        for h in self.hosts:
            (self.workdir / "spool" / h.hostname).mkdir(parents=True)
        self.conf.write_text(_config(self.workdir, self.hosts))
        env = self.env(dict(os.environ))
        self.daemons.append(start_on(self.hosts[0], ["slurmctld", "-D", "-i", "-f", str(self.conf)], env))
        for h in self.hosts:
            self.daemons.append(start_on(h, ["slurmd", "-D", "-N", h.hostname, "-f", str(self.conf)], env))
        self._wait_until_idle(env)
        return self

    def _wait_until_idle(self, env, timeout=60.0):
        deadline = time.monotonic() + timeout
        states = ""
        while time.monotonic() < deadline:
            proc = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], env, timeout=10)
            states = proc.stdout.strip()
            if proc.returncode == 0 and states.count("idle") == len(self.hosts):
                return
            time.sleep(0.5)
        raise RuntimeError(f"Slurm nodes not idle within {timeout} s: {states!r}\n{self.logs()}")

    def run(self, argv, env, timeout=300.0) -> subprocess.CompletedProcess:
        """A client command (srun, sbatch, salloc, sinfo) on host 0."""
        p = start_on(self.hosts[0], argv, env)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def logs(self) -> str:
        return "\n".join(f"--- {f.name}\n{f.read_text()[-2000:]}" for f in sorted(self.workdir.glob("*.log")))

    def stop(self):
        if self.hosts and self.daemons:  # end every job first: its tasks are not the daemons' children
            self.run(["scancel", "--full", "--user", "root"], self.env(dict(os.environ)), timeout=30)
            time.sleep(1)
        for p in self.daemons:
            p.terminate()
        for p in self.daemons:
            try:
                p.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
        if self.hosts:
            netns_hosts.destroy(self.hosts)
        if self.munged_pid:
            try:
                os.kill(self.munged_pid, 15)
            except ProcessLookupError:
                pass
        if self.made_key:
            MUNGE_KEY.unlink(missing_ok=True)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()
