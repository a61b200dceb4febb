"""Each clean venv of this folder holds a torch (1.6 GB for PyPI's CUDA build): it goes when its test ends, so the
matrix never needs more than one at a time on disk (pytest keeps every tmp_path of a run until the next ones)."""
import shutil

import pytest


@pytest.fixture(autouse=True)
def _venvs_go_when_their_test_ends(tmp_path):
    yield
    shutil.rmtree(tmp_path / "venv", ignore_errors=True)
