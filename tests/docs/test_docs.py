"""The documentation site (docs/, Sphinx + MyST) builds without a warning, its environment page says what the code
reads, and the README stays a short front door."""
import re
import subprocess
import sys
from pathlib import Path

import ccl_core

ROOT = Path(__file__).resolve().parents[2]
ENVIRONMENT = ROOT / "docs" / "environment.md"


def test_the_site_builds_with_every_page_link_and_anchor_resolved(tmp_path):
    out = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"),
                          str(tmp_path / "site")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "architecture.html").exists()


def table_after(heading: str) -> list[list[str]]:
    """The rows of the first table under `heading` in docs/environment.md, as cell texts."""
    text = ENVIRONMENT.read_text()
    section = text.split(f"\n{heading}\n", 1)[1]
    rows = []
    for line in section.splitlines():
        if rows and not line.startswith("|"):
            break
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows[1:]  # without the header


def test_ccl_core_settings_table_is_the_declared_one():
    documented = [[name.strip("`"), kind, default, meaning] for name, kind, default, meaning in
                  table_after("## ccl-core's own settings")]
    assert documented == [list(s) for s in ccl_core.settings()]


def test_the_table_of_what_ccl_core_sets_for_oneccl_is_what_it_sets():
    documented = [[name.strip("`"), value.strip("`"), why] for name, value, why in
                  table_after("## What ccl-core sets for oneCCL")]
    assert documented == [list(d) for d in ccl_core.env_defaults()]


READS = re.compile(r'(?:getenv|setting_text|setting_on|setting_bytes|env_flag|environ\.get|environ\[|os\.getenv)'
                   r'\(?\s*"((?:CCL|ONECCL|FI|TORCH)_[A-Z0-9_]+)"')


def test_every_variable_the_packages_read_is_on_the_environment_page():
    read = set()
    for path in (ROOT / "packages").rglob("*"):
        if path.suffix in (".cpp", ".hpp", ".py"):
            read |= set(READS.findall(path.read_text(errors="replace")))
    assert len(read) > 15, read  # the pattern still finds the reads
    page = ENVIRONMENT.read_text()
    assert sorted(v for v in read if f"`{v}" not in page) == []


def test_readme_opens_with_the_two_commands_and_stays_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, len(lines)
    block = lines[lines.index("```bash") + 1:lines.index("```bash") + 3]
    assert block[0].startswith("ci/demo") and block[1].startswith("ci/test"), block
