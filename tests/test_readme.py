"""The README keeps its promises: the library example runs, the commands are shown."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_example(marker: str) -> str:
    text = README.read_text()
    marker = text.index(marker)
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, marker)
    assert match, "README has no python example after the marker"
    return match.group(1)


def run_example(tmp_path, marker: str) -> str:
    """Run the python block after ``marker`` in a fresh directory; returns its stdout."""
    script = tmp_path / "example.py"
    script.write_text(readme_example(marker))
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=110,
        env={**os.environ, "PYTHONPATH": str(README.parent)},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.timeout(120)
def test_library_example_runs(tmp_path):
    assert "COMPACTED" in run_example(tmp_path, "<!-- readme-example")
    assert (tmp_path / "state.db").exists()


@pytest.mark.timeout(120)
def test_turns_example_runs(tmp_path):
    out = run_example(tmp_path, "<!-- readme-turns-example")
    assert "'user', 'assistant', 'tool', 'assistant'" in out
    assert (tmp_path / "gateway.db").exists()


def test_readme_shows_the_two_commands():
    text = README.read_text()
    assert "session-actors simulate" in text
    assert "python -m pytest" in text
