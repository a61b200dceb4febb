"""tools/retarget.py points ccl-torch's sources at another torch minor: version and pin, nothing else."""
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "packages" / "ccl-torch" / "tools" / "retarget.py"


def test_retarget_rewrites_the_version_and_the_torch_pin(tmp_path):
    for name in ("meson.build", "pyproject.toml"):
        shutil.copy(ROOT / "packages" / "ccl-torch" / name, tmp_path / name)
    before = (tmp_path / "meson.build").read_text()
    out = subprocess.run([sys.executable, TOOL, "2.12", tmp_path], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "2.12.0", out.stderr
    after = (tmp_path / "meson.build").read_text()
    assert "version: '2.12.0'" in after and "version: '2.13.0'" in before
    assert len(after.splitlines()) == len(before.splitlines())
    assert '"torch==2.12.*"' in (tmp_path / "pyproject.toml").read_text()


def test_retarget_refuses_what_is_not_a_minor(tmp_path):
    out = subprocess.run([sys.executable, TOOL, "2.12.1", tmp_path], capture_output=True, text=True)
    assert out.returncode != 0 and "'2.12.1' is not a torch minor version" in out.stderr
