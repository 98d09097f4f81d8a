"""`make test-slow` runs the suite in a random order (pytest-randomly), its seed printed and
reusable, so a test that depends on what ran before it in its worker is found; every other run
keeps the file order. Nothing ran the suite in another order, and two tool-use tests passed or
failed with what had run before them."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_slow_runs_the_suite_in_a_random_order_with_its_seed_printed():
    plan = subprocess.run(["make", "-n", "test-slow", "SEED=1234", "-o", "assets"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert "shuffled order: seed 1234 (again: make test-slow SEED=1234)" in plan
    runs = [line for line in plan.splitlines() if "-m pytest" in line]
    assert len(runs) == 2 and "-p randomly --randomly-seed=1234" in runs[1]
    # the rest of the suite, not only the slow tests; real components keep their file order
    assert '-m "not slow and not component"' in runs[1]
    fresh = subprocess.run(["make", "-n", "test-slow", "SEED=random", "-o", "assets"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout
    seed = re.search(r"shuffled order: seed (\d+)", fresh).group(1)
    assert seed != "random" and fresh.count(f"--randomly-seed={seed}") == 1  # drawn once


def test_pytest_randomly_is_a_test_dependency_and_off_by_default():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "pytest-randomly" in project["project"]["optional-dependencies"]["test"]
    assert "-p no:randomly" in project["tool"]["pytest"]["ini_options"]["addopts"]
