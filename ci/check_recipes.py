"""Render every conda recipe for every variant, offline, and check it against conda-forge and the pip packaging.

    python ci/check_recipes.py [--root DIR]      # exit 1 and one line per problem when anything is off

Checks: every package under packages/ has recipes/<package>/recipe.yaml; each renders for every variant of
recipes/conda_build_config.yaml (template and schema errors fail); the recipe's version equals the package's
(meson.build `project(version:)`); the pytorch variants are the torch minors ccl-torch supports (its meson.build's
`supported_minors`); every exact pin of an Intel package is a version conda-forge has (CONDA_FORGE below, with
where each was confirmed); a conda pin that differs from the pip pin is explained in recipes/README.md; torch
extensions follow conda-forge's convention (pytorch in host, no pytorch in run: its run_exports pin it); ccl-torch
pins the exact ccl-core it is built with; the test section runs the package on 2 ranks. conda itself cannot run here
(no conda channel is reachable), so nothing is built: ci/build-conda does that where one is.
"""
from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

from rattler_build import JinjaConfig, RenderConfig, Stage0Recipe, VariantConfig

# PyPI distribution -> conda package of the same binaries (Intel's conda names)
CONDA_NAME = {"oneccl-cpu": "oneccl", "oneccl-cpu-devel": "oneccl-devel", "impi-rt": "impi_rt",
              "oneccl": "oneccl", "intel-sycl-rt": "intel-sycl-rt"}

# What conda-forge has, looked up on anaconda.org/conda-forge/<name>/files (December 2026); recipes/README.md
# gives the pages. Only versions a recipe may pin are listed.
CONDA_FORGE = {
    "oneccl": {"2021.16.0"},
    "oneccl-devel": {"2021.16.0"},
    "impi_rt": {"2021.16.0", "2021.17.0", "2021.17.2", "2021.18.0"},
    "impi-devel": {"2021.16.0", "2021.17.0", "2021.17.2", "2021.18.0"},
    "intel-sycl-rt": {"2025.2.0", "2025.3.1", "2025.3.2"},
}
# conda-forge's pytorch at that lookup: 2.8.0, 2.9.1, 2.10.0, 2.11.0, 2.12.0, 2.12.1; the variants follow ccl-torch
# (below): ci/build-conda builds 2.8-2.12 against conda-forge's, 2.13-2.15 once conda-forge has them.


def supported_torch_minors(root: Path) -> list[str]:
    m = re.search(r"supported_minors = \[([^\]]*)\]", (root / "packages" / "ccl-torch" / "meson.build").read_text())
    if not m:
        raise ValueError("packages/ccl-torch/meson.build: no supported_minors")
    return [s.strip().strip("'").replace("_", ".") for s in m.group(1).split(",")]

def package_version(pkg_dir: Path) -> str:
    m = re.search(r"project\([^)]*?version:\s*'([^']+)'", (pkg_dir / "meson.build").read_text(), re.S)
    if not m:
        raise ValueError(f"{pkg_dir / 'meson.build'}: no project version")
    return m.group(1)


def pip_pins(pkg_dir: Path) -> dict[str, str]:
    """name -> version of every exact pin in pyproject.toml (dependencies and build requirements)."""
    data = tomllib.loads((pkg_dir / "pyproject.toml").read_text())
    specs = data.get("project", {}).get("dependencies", []) + data.get("build-system", {}).get("requires", [])
    pins = {}
    for spec in specs:
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+)", spec)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def requirement_pins(rendered: dict) -> dict[str, str]:
    pins = {}
    reqs = rendered.get("requirements", {})
    for section in ("build", "host", "run", "run_constraints"):
        for spec in reqs.get(section, []) or []:
            m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*(\S+)", str(spec))
            if m:
                pins[m.group(1).lower()] = m.group(2)
    return pins


def test_runs_package(rendered: dict) -> bool:
    """A script test that starts 2 ranks of something (torchrun / our launcher / mpiexec with -n 2)."""
    for test in rendered.get("tests", []) or []:
        script = test.get("script") if isinstance(test, dict) else None
        lines = script if isinstance(script, list) else [script] if script else []
        for line in lines:
            text = str(line)
            if re.search(r"(--nproc-per-node|-n)\s+2\b", text):
                return True
    return False


def explained(root: Path, conda_name: str, conda_version: str, pip_version: str) -> bool:
    """recipes/README.md names both versions of a pin that differs between conda and pip."""
    readme = root / "recipes" / "README.md"
    text = readme.read_text() if readme.is_file() else ""
    return any(conda_name in line and conda_version in line and pip_version in line for line in text.splitlines())


def requirement_names(rendered: dict, section: str) -> set[str]:
    specs = (rendered.get("requirements", {}) or {}).get(section, []) or []
    return {re.split(r"[\s=<>!]", str(spec).strip(), maxsplit=1)[0].lower() for spec in specs}


def check(root: Path) -> list[str]:
    problems = []
    recipes = root / "recipes"
    variants = VariantConfig.from_conda_build_config(recipes / "conda_build_config.yaml", JinjaConfig())
    minors = [str(m) for m in variants.get("pytorch") or []]
    if minors != supported_torch_minors(root):
        problems.append(f"conda_build_config.yaml: pytorch variants {', '.join(minors)} differ from the torch minors "
                        f"ccl-torch supports ({', '.join(supported_torch_minors(root))}, its meson.build)")
    packages = sorted(p for p in (root / "packages").iterdir() if (p / "pyproject.toml").is_file())
    if not packages:
        return [f"no packages found under {root / 'packages'}"]
    for pkg in packages:
        name = pkg.name
        recipe_file = recipes / name / "recipe.yaml"
        if not recipe_file.is_file():
            problems.append(f"{name}: recipe missing ({recipe_file.relative_to(root)})")
            continue
        try:
            rendered = Stage0Recipe.from_file(recipe_file).render(variants, RenderConfig())
        except Exception as e:  # noqa: BLE001  (template, schema and variant errors alike)
            problems.append(f"{name}: does not render: {e}")
            continue
        if not rendered:
            problems.append(f"{name}: renders to no variant")
            continue
        version = package_version(pkg)
        pins = pip_pins(pkg)
        for variant in rendered:
            r = variant.recipe.to_dict()
            label = f"{name} [{', '.join(f'{k}={v}' for k, v in sorted(variant.variant.items()) if k != 'target_platform')}]"
            expected = version
            if str(r["package"]["version"]) != expected:
                problems.append(f"{label}: version {r['package']['version']} differs from the package's {expected}")
            conda_pins = requirement_pins(r)
            for conda_name, conda_version in conda_pins.items():
                if conda_name in CONDA_FORGE and conda_version not in CONDA_FORGE[conda_name]:
                    problems.append(f"{label}: {conda_name} =={conda_version} is not a version conda-forge has "
                                    f"({', '.join(sorted(CONDA_FORGE[conda_name]))})")
            for pypi_name, pip_version in pins.items():
                conda_name = CONDA_NAME.get(pypi_name)
                if conda_name is None:
                    continue
                if conda_name not in conda_pins:
                    if pypi_name != "oneccl-cpu-devel":
                        problems.append(f"{label}: {conda_name} is not pinned (pip pins {pypi_name}=={pip_version})")
                    continue
                if conda_pins[conda_name] != pip_version and not explained(root, conda_name, conda_pins[conda_name],
                                                                           pip_version):
                    problems.append(f"{label}: {conda_name} =={conda_pins[conda_name]} differs from pip's "
                                    f"{pypi_name}=={pip_version} and recipes/README.md does not explain it")
            if "pytorch" in variant.variant:  # conda-forge's torch-extension convention
                if "pytorch" not in requirement_names(r, "host"):
                    problems.append(f"{label}: pytorch is not in host (its run_exports give the run pin)")
                if "pytorch" in requirement_names(r, "run"):
                    problems.append(f"{label}: pytorch is in run; conda-forge leaves the run pin to pytorch's "
                                    f"run_exports")
            # pip's `+xpu` label names the ccl-core wheel built against PyPI's SYCL oneCCL (ci/xpu_variant.py);
            # conda-forge has one oneccl for both, so one ccl-core: the public version must match
            if (name != "ccl-core" and "ccl-core" in pins
                    and conda_pins.get("ccl-core") != pins["ccl-core"].split("+")[0]):
                problems.append(f"{label}: ccl-core pin {conda_pins.get('ccl-core')} is not the exact ccl-core "
                                f"{pins['ccl-core']} it builds with")
            if not test_runs_package(r):
                problems.append(f"{label}: the test section does not run the package on 2 ranks")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args(argv)
    problems = check(args.root)
    for p in problems:
        print(f"recipe check: {p}", file=sys.stderr)
    if not problems:
        print("recipe check: every recipe renders for every variant and matches the pip packaging")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
