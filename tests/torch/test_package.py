"""How the package behaves on import and launch: autoload, version guard, aliases, env scripts, switches."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from ccl_core import free_port
from ranks import clean_env


def py(code, env=None, timeout=120):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env or clean_env(), capture_output=True,
                          text=True, timeout=timeout)


def test_import_torch_registers_ccl_without_importing_us():
    out = py("""
        import sys, torch, torch.distributed as dist
        print("ccl" in dist.Backend.backend_list, hasattr(dist, "ProcessGroupCCL"))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_autoload_can_be_turned_off():
    out = py("""
        import torch, torch.distributed as dist
        print("ccl" in dist.Backend.backend_list)
    """, env={**clean_env(), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert out.stdout.split() == ["False"], out.stderr


def test_registration_is_idempotent_and_aliases_agree():
    out = py("""
        import torch, torch.distributed as dist
        import oneccl_bindings_for_pytorch as a, torch_ccl as b
        a.register(); a.register()
        print(dist.Backend.backend_list.count("ccl"), a.__version__ == b.__version__, a.cwd == b.cwd,
              b.ProcessGroupCCL is dist.ProcessGroupCCL)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "True", "True", "True"]


def test_a_broken_install_never_breaks_import_torch(tmp_path):
    # Shadow ccl_core with a module that fails: `import torch` must still work and only warn.
    (tmp_path / "ccl_core").mkdir()
    (tmp_path / "ccl_core" / "__init__.py").write_text("raise ImportError('simulated broken ccl_core')\n")
    env = {**clean_env(), "PYTHONPATH": str(tmp_path)}
    out = py("import torch; print(torch.ones(1).item())", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"
    assert "'ccl' backend could not be registered" in out.stderr and "simulated broken ccl_core" in out.stderr


def test_env_scripts_are_harmless_to_source():
    out = py("import oneccl_bindings_for_pytorch as m; print(m.cwd)")
    cwd = out.stdout.strip()
    for script in ("setvars.sh", "vars.sh"):
        show = "; ".join(f'echo {v}=${v}' for v in ("CCL_ROOT", "CPATH", "LIBRARY_PATH", "LD_LIBRARY_PATH",
                                                      "I_MPI_ROOT", "FI_PROVIDER_PATH"))
        res = subprocess.run(["bash", "-c", f"set -eu; source {cwd}/env/{script}; echo sourced; command -v mpiexec; "
                              f"{show}"], env=clean_env(), capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith("sourced") and "mpiexec" in res.stdout
        # what the original's script exported, pointing at this environment's oneCCL and Intel MPI
        exported = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
        root = Path(exported["CCL_ROOT"])
        assert (root / "include" / "oneapi" / "ccl.hpp").is_file() and (root / "lib" / "libccl.so.1").is_file()
        assert exported["CPATH"].split(":")[0] == str(root / "include")
        for name in ("LIBRARY_PATH", "LD_LIBRARY_PATH"):
            assert exported[name].split(":")[0] == str(root / "lib")
        assert exported["I_MPI_ROOT"] == str(root) and list(Path(exported["FI_PROVIDER_PATH"]).glob("*-fi.so"))


VERBOSE_SCRIPT = """
import os, datetime, torch, torch.distributed as dist
dist.init_process_group("ccl", timeout=datetime.timedelta(seconds=60))
dist.all_reduce(torch.ones(2, 3))
dist.destroy_process_group()
"""


def test_verbose_switch_logs_each_op(tmp_path):
    script = tmp_path / "v.py"
    script.write_text(VERBOSE_SCRIPT)
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**clean_env(), "RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": port, "ONECCL_BINDINGS_FOR_PYTORCH_ENV_VERBOSE": "1"})
             for r in range(2)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    assert "rank 0/2 allreduce [Float[2, 3]] issued" in errs[0]
    assert "rank 1/2 allreduce [Float[2, 3]] done in" in errs[1]


def test_wait_gdb_switch_waits_for_a_debugger(tmp_path):
    script = tmp_path / "g.py"
    script.write_text(VERBOSE_SCRIPT)
    env = {**clean_env(), "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "ONECCL_BINDINGS_FOR_PYTORCH_ENV_WAIT_GDB": "1"}
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = ""
    deadline = time.monotonic() + 60
    while "waiting for a debugger" not in line and time.monotonic() < deadline:
        line = p.stderr.readline()
    time.sleep(1.5)
    still_waiting = p.poll() is None
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert f"gdb -p {p.pid}" in line and still_waiting


def test_a_broken_device_plugin_only_warns(tmp_path):
    """A plugin (entry point in oneccl_bindings_for_pytorch.device_plugins) that fails to load must not break
    `import torch` or CPU collectives: it is skipped with a warning that names it."""
    (tmp_path / "broken_ccl_plugin.py").write_text("def register():\n    raise ImportError('libsycl.so.9: cannot open')\n")
    info = tmp_path / "broken_ccl_plugin-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-ccl-plugin\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[oneccl_bindings_for_pytorch.device_plugins]\n"
                                           "brokendev = broken_ccl_plugin:register\n")
    code = ("import torch, torch.distributed as dist\n"
            f"dist.init_process_group('ccl', init_method='file://{tmp_path}/rdv', rank=0, world_size=1)\n"
            "t = torch.ones(3); dist.all_reduce(t); print(t.tolist(), dist.Backend.backend_capability['ccl'])\n"
            "dist.destroy_process_group()\n")
    env = dict(clean_env(), PYTHONPATH=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[1.0, 1.0, 1.0] ['cpu']", out.stdout
    assert "device plugin 'brokendev'" in out.stderr and "libsycl.so.9: cannot open" in out.stderr, out.stderr
