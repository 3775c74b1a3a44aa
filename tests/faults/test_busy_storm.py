"""A busy storm on SQLite: a foreign connection keeps taking the write lock.

Another process's ``BEGIN IMMEDIATE`` (here: this test's own sqlite3 connection)
holds the write lock for up to 0.6 s at a time, again and again, while a worker
whose store has a short patience (0.2 s) appends and compacts. Calls that run out
of patience raise `StoreBusyError` and must have written nothing (their messages
are absent); acknowledged ones are all there; the worker carries on and exits
cleanly; no fork, no seq gap.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import uuid
from contextlib import closing

import pytest

from persistence import open_store

from .harness import (
    Tally,
    check_after_failures,
    failed_calls,
    finish,
    spawn_worker,
    trials,
)

#: Upper bound on trials when the first ones made no call give up.
_MAX_TRIALS = 8


@pytest.mark.timeout(600)
def test_busy_storm_with_a_foreign_write_lock(sqlite_path: str, tmp_path, tally: Tally) -> None:
    open_store(sqlite_path).close()  # the schema, before the storm
    failures_before = len(tally.failures)
    busy_total, trial = 0, 0
    # A loaded machine may run a whole trial between two holds: keep storming (bounded)
    # until at least one call has really given up, so the check below is never vacuous.
    while trial < trials(2) or (busy_total == 0 and trial < _MAX_TRIALS):
        problems, holds, busy = _one_trial(sqlite_path, tmp_path / f"trial-{trial}", trial)
        tally.record(problems, faulted=False)
        tally.faults += holds
        busy_total += busy
        trial += 1
    assert tally.failures[failures_before:] == []
    assert busy_total > 0  # the storm really made calls give up


def _one_trial(db: str, workdir, trial: int) -> tuple[list[str], int, int]:
    workdir.mkdir()
    root = f"bs-{uuid.uuid4().hex[:8]}"
    ledger = workdir / "ledger"
    rng = random.Random(trial)
    proc = spawn_worker(
        db, root, ledger, args=["--rounds", "60", "--patience", "0.2", "--mode", rng.choice(("in_place", "rotate"))]
    )
    holds, pause = 0, threading.Event()
    with closing(sqlite3.connect(db, isolation_level=None, timeout=30)) as foreign:
        while proc.poll() is None:
            foreign.execute("BEGIN IMMEDIATE")
            holds += 1
            pause.wait(rng.uniform(0.05, 0.6))
            foreign.execute("COMMIT")
            pause.wait(rng.uniform(0.0, 0.1))
    code, err = finish(proc)
    if code != 0:
        return [f"worker exited {code} in the storm: {err}"], holds, 0
    failed = failed_calls(ledger)
    busy = sum(1 for kind, _ in failed if kind == "StoreBusyError")
    problems = [f"failures other than StoreBusyError: {failed[:3]}"] if busy != len(failed) else []
    problems += check_after_failures(db, root, ledger, failed)
    return problems, holds, busy
