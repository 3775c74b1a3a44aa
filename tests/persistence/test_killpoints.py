"""The test-only kill points: their spec, that the hooks do nothing when unset, and
that an armed process dies at the named point only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from persistence import _hooks as hooks
from persistence import _killpoints as killpoints

ROOT = Path(__file__).resolve().parents[2]


def test_spec_is_parsed_strictly() -> None:
    assert killpoints.parse("append:before_commit") == ("append", "before_commit", 1)
    assert killpoints.parse("*:after_fence:3") == ("*", "after_fence", 3)
    for bad in ("append", "append:mid_air", ":before_begin", "append:after_commit:0", "a:b:c:d"):
        with pytest.raises(ValueError):
            killpoints.parse(bad)


def test_unarmed_hook_does_nothing() -> None:
    assert killpoints.from_environment() is None  # the suite itself never runs armed
    hooks.point("before_commit", "append")  # returns: this process lives on


def test_armed_process_dies_at_the_named_point_only(tmp_path) -> None:
    script = (
        "from persistence import _hooks as hooks\n"
        "hooks.point('before_commit', 'append')\n"  # another point: ignored
        "hooks.point('after_commit', ['renew_lease'])\n"  # another operation: ignored
        "print('alive', flush=True)\n"
        "hooks.point('after_commit', ['renew_lease', 'append'])\n"
        "print('survived', flush=True)\n"
    )
    env = {**os.environ, killpoints.ENV_KILL_AT: "append:after_commit", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9
    assert proc.stdout.split() == ["alive"]
