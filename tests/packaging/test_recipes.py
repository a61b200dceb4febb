"""The offline recipe check passes on the real recipes and fails, naming the problem, on broken ones."""
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_recipes", ROOT / "ci" / "check_recipes.py")
check_recipes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_recipes)


@pytest.fixture
def tree(tmp_path):
    """A copy of what the check reads: recipes/ and each package's pyproject.toml and meson.build."""
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")  # README.md included: it explains pins
    for pkg in (ROOT / "packages").iterdir():
        if (pkg / "pyproject.toml").is_file():
            (tmp_path / "packages" / pkg.name).mkdir(parents=True)
            for f in ("pyproject.toml", "meson.build"):
                shutil.copy(pkg / f, tmp_path / "packages" / pkg.name / f)
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


def test_real_recipes_pass():
    assert check_recipes.check(ROOT) == []


def test_every_variant_is_rendered(tree):
    from rattler_build import JinjaConfig, RenderConfig, Stage0Recipe, VariantConfig

    variants = VariantConfig.from_conda_build_config(tree / "recipes" / "conda_build_config.yaml", JinjaConfig())
    rendered = Stage0Recipe.from_file(tree / "recipes" / "ccl-torch" / "recipe.yaml").render(variants, RenderConfig())
    combos = {(v.variant["python"], v.variant["pytorch"]) for v in rendered}
    minors = [f"2.{m}" for m in range(8, 16)]
    assert combos == {(p, t) for p in ("3.10", "3.11", "3.12", "3.13") for t in minors}
    strings = {v.recipe.to_dict()["build"]["string"] for v in rendered}
    assert all(s.startswith("cpu_torch2") for s in strings) and len(strings) == 4 * len(minors)
    assert {s.split("_")[1] for s in strings} == {"torch" + m.replace(".", "") for m in minors}
    # one version for every torch (the build string tells the packages apart)
    assert {str(v.recipe.to_dict()["package"]["version"]) for v in rendered} == {"3.0.0"}


def test_template_error_fails(tree):
    edit(tree / "recipes" / "ccl-core" / "recipe.yaml", "name: ${{ name }}", "name: ${{ name | no_such_filter }}")
    assert any("ccl-core: does not render" in p for p in check_recipes.check(tree))


def test_version_mismatch_fails(tree):
    edit(tree / "recipes" / "ccl-core" / "recipe.yaml", 'version: "0.1.0"', 'version: "0.2.0"')
    problems = check_recipes.check(tree)
    assert any("ccl-core [" in p and "version 0.2.0 differs from the package's 0.1.0" in p for p in problems)


def test_ccl_torch_version_out_of_step_fails(tree):
    edit(tree / "recipes" / "ccl-torch" / "recipe.yaml", 'version: "3.0.0"', 'version: "3.0.1"')
    problems = check_recipes.check(tree)
    assert any("ccl-torch [" in p and "version 3.0.1 differs from the package's 3.0.0" in p for p in problems)


def test_a_pin_conda_forge_lacks_fails(tree):
    edit(tree / "recipes" / "ccl-core" / "recipe.yaml", 'oneccl_version: "2021.16.0"', 'oneccl_version: "2021.16.2"')
    problems = check_recipes.check(tree)
    assert any("oneccl ==2021.16.2 is not a version conda-forge has (2021.16.0)" in p for p in problems)


def test_an_unexplained_difference_from_pip_fails(tree):
    readme = tree / "recipes" / "README.md"
    readme.write_text("\n".join(l for l in readme.read_text().splitlines() if "impi_rt" not in l))
    problems = check_recipes.check(tree)
    assert any("impi_rt ==2021.18.0 differs from pip's impi-rt==2021.18.1 and recipes/README.md does not explain it"
               in p for p in problems)


def test_a_pytorch_variant_ccl_torch_does_not_support_fails(tree):
    edit(tree / "recipes" / "conda_build_config.yaml", '  - "2.8"', '  - "2.7"\n  - "2.8"')
    assert any("pytorch variants 2.7, 2.8, 2.9, 2.10, 2.11, 2.12, 2.13, 2.14, 2.15 differ from the torch minors "
               "ccl-torch supports (2.8, 2.9," in p for p in check_recipes.check(tree))


def test_pytorch_in_run_breaks_the_convention(tree):
    edit(tree / "recipes" / "ccl-torch" / "recipe.yaml", "  run:\n    - python\n",
         "  run:\n    - python\n    - pytorch ${{ pytorch }}.*\n")
    problems = check_recipes.check(tree)
    assert any("pytorch is in run; conda-forge leaves the run pin to pytorch's run_exports" in p for p in problems)


def test_inexact_ccl_core_pin_fails(tree):
    recipe = tree / "recipes" / "ccl-torch" / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("    - ccl-core ==${{ core_version }}", "    - ccl-core >=0.1"))
    assert any("is not the exact ccl-core 0.1.0" in p for p in check_recipes.check(tree))


def test_missing_recipe_fails(tree):
    shutil.rmtree(tree / "recipes" / "ccl-torch")
    assert "ccl-torch: recipe missing (recipes/ccl-torch/recipe.yaml)" in check_recipes.check(tree)


def test_test_section_that_does_not_run_the_package_fails(tree):
    edit(tree / "recipes" / "ccl-core" / "recipe.yaml", "      - python -m ccl_core.launch -n 2 smoke_core.py\n", "")
    assert any("ccl-core [" in p and "does not run the package on 2 ranks" in p for p in check_recipes.check(tree))


@pytest.mark.parametrize("cmd,expect", [
    (["-m", "ccl_core.launch", "-n", "2", "recipes/ccl-core/smoke_core.py"], "ccl-core smoke test: rank 1/2 ok"),
    (["-m", "torch.distributed.run", "--nproc-per-node", "2", "recipes/ccl-torch/smoke_torch.py"],
     "ccl-torch smoke test: rank 1 ok"),
])
def test_recipe_smoke_tests_pass_here(cmd, expect):
    """What each recipe's test section runs, run the same way against the installed packages."""
    import subprocess
    import sys

    from ccl_core import free_port
    from ranks import clean_env

    if "torch.distributed.run" in cmd:
        cmd = cmd[:2] + ["--master-port", str(free_port())] + cmd[2:]
    out = subprocess.run([sys.executable, *cmd], cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert expect in out.stdout


def test_build_conda_says_plainly_when_no_channel_is_reachable():
    out = subprocess.run([str(ROOT / "ci" / "build-conda")], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "CONDA_CHANNEL": "https://conda.invalid/conda-forge"})
    assert out.returncode == 0, out.stderr
    assert "cannot build here: the conda channel https://conda.invalid/conda-forge is not reachable" in out.stderr
    assert "nothing was built" in out.stderr
