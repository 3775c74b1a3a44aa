"""``python -m tests.benchmarks`` lists every benchmark, each importable with a ``main``."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(60)
def test_the_list_names_importable_benchmarks():
    listed = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks", "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
        check=True,
    ).stdout.split("\n")
    names = [line.split()[0] for line in listed if line.strip()]
    from tests.benchmarks.__main__ import BENCHMARKS

    assert names == list(BENCHMARKS) and len(names) <= 12  # a short list: a new figure joins a benchmark first
    for name in names:
        assert callable(importlib.import_module(f"tests.benchmarks.{BENCHMARKS[name][0]}").main), name


@pytest.mark.timeout(60)
def test_an_unknown_name_is_a_usage_error():
    result = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks", "nope"], cwd=ROOT, capture_output=True, text=True, timeout=50
    )
    assert result.returncode == 2 and "unknown benchmark" in result.stderr
