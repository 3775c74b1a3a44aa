"""What ``simulate`` prints while it runs: its header (with the seed) first and at once,
a progress bar on a terminal, one progress line per tenth of the run when piped."""

from __future__ import annotations

import json
import re
import selectors
import sqlite3
import subprocess
import time
from contextlib import closing

import pytest

from persistence import open_store
from tests.cli.helpers import REPO, cli_argv, cli_env, run_on_terminal, run_piped

pytestmark = pytest.mark.timeout(180)

SMALL = ("--sessions", "4", "--turns", "10", "--threads", "2", "--compress-delay-ms", "1")
PROGRESS_LINE = re.compile(r"^simulating: (\d+)/(\d+) turns \((\d+)%\), [\d.]+s$")


def read_line(proc: subprocess.Popen, timeout: float) -> str:
    """The next stdout line of ``proc``, or fail after ``timeout`` seconds."""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise AssertionError(f"no line within {timeout}s")
    return proc.stdout.readline()


def test_header_with_the_seed_reaches_a_pipe_before_the_run_starts(sqlite_path: str) -> None:
    open_store(sqlite_path).close()  # an existing database the run must wait for
    with closing(sqlite3.connect(sqlite_path, isolation_level=None)) as blocker:
        blocker.execute("BEGIN IMMEDIATE")  # the run cannot write until this ends
        proc = subprocess.Popen(
            cli_argv("--db", sqlite_path, "simulate", "--seed", "4242", *SMALL),
            env=cli_env(),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        try:
            header = read_line(proc, timeout=60)
            still_running = proc.poll() is None
        finally:
            blocker.execute("ROLLBACK")
    out, err = proc.communicate(timeout=120)
    assert "seed 4242" in header and header.startswith("simulate (actors)")
    assert still_running  # flushed while the run was blocked, not at exit
    assert proc.returncode == 0, err
    assert "OK: no fork, nothing lost" in out


def test_piped_progress_is_one_line_per_tenth(sqlite_path: str) -> None:
    result = run_piped("--db", sqlite_path, "simulate", "--seed", "7", *SMALL)
    assert result.code == 0, result.err
    lines = [line for line in result.err.splitlines() if line.startswith("simulating")]
    counts = []
    for line in lines:
        match = PROGRESS_LINE.match(line)
        assert match, line
        counts.append(int(match.group(1)))
        assert int(match.group(2)) == 40
    assert counts == sorted(counts) and counts[-1] == 40
    assert 1 <= len(lines) <= 11
    assert "\r" not in result.err and "\x1b[" not in result.err
    assert "errors: calls of the workload that raised" in result.out


def test_json_run_keeps_stdout_one_document_and_shows_the_seed_on_stderr(sqlite_path: str) -> None:
    result = run_piped("--db", sqlite_path, "simulate", "--seed", "11", "--json", *SMALL)
    assert result.code == 0, result.err
    assert json.loads(result.out)["seed"] == 11
    assert "seed 11" in result.err.splitlines()[0]


def test_terminal_gets_a_progress_bar(sqlite_path: str) -> None:
    result = run_on_terminal("--db", sqlite_path, "simulate", "--seed", "5", *SMALL, columns=100)
    assert result.code == 0, result.out
    assert "━" in result.out and "40/40" in result.out
    assert not any(PROGRESS_LINE.match(line) for line in result.out.splitlines())


def test_naive_run_explains_its_errors_count() -> None:
    started = time.monotonic()
    result = run_piped("simulate", "--naive", "--seed", "3", "--sessions", "6", "--turns", "15")
    assert result.code == 1  # the naive path forks
    assert "FAIL" in result.out
    legend = next(line for line in result.out.splitlines() if line.startswith("errors:"))
    assert "fork" in legend and "silently" in legend
    assert time.monotonic() - started < 120
