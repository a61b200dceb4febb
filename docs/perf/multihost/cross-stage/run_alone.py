"""The cross-host stage alone: cross_alone.py on 2 netns hosts of 1 rank each, the link shaped to 2.5 Gbit/s as
tests/multihost/shaped_link.py does; prints each timing over the link limit of 32 MiB.
Usage: python run_alone.py [pieces] [NAME=VALUE ...]  (as root, from a venv with ccl-core and torch's torchrun)"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "../../../..")
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests/multihost"))
import netns_hosts  # noqa: E402
import shaped_link  # noqa: E402
from ranks import clean_env  # noqa: E402

args = sys.argv[1:]
job_args = [args.pop(0)] if args[:1] == ["pieces"] else []
extra = dict(kv.split("=", 1) for kv in args)
hosts = netns_hosts.create(str(os.getpid() % 10000), 2)
try:
    netns_hosts.shape(hosts, "2500mbit")
    rate = shaped_link.link_rate(hosts)
    env = dict(clean_env(), OMP_NUM_THREADS="1", **extra)
    for code, out, err in netns_hosts.torchrun_on_hosts(hosts, os.path.join(HERE, "cross_alone.py"), [1, 1], env, 29600,
                                                        args=job_args):
        if code != 0:
            print("FAIL", code, out, err[-3000:])
        for line in out.splitlines():
            if line.startswith("RESULT"):
                limit = (32 << 20) / rate * 1000
                times = json.loads(line[len("RESULT "):])
                print(extra, f"limit {limit:.1f} ms", {k: [round(t / limit, 2) for t in v] for k, v in times.items()})
finally:
    netns_hosts.destroy(hosts)
