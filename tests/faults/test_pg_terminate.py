"""pg_terminate_backend during commits: the server kills the worker's connections
mid-transaction while it appends and compacts.

A terminated transaction is rolled back by the server; one cut during COMMIT may or
may not have been applied, and the store says so (`StoreBusyError`) instead of
acknowledging. So whatever was acknowledged must be there, nothing may fork or
leave a gap, and the worker must carry on (a new connection from the pool) and exit
cleanly.
"""

from __future__ import annotations

import random
import threading
import uuid

import pytest

from persistence import open_store
from tests.pg import with_application_name

from .harness import (
    Tally,
    finish,
    integrity_problems,
    ledger_acks,
    recover,
    spawn_worker,
    trials,
)

#: Backends of the worker that are inside a transaction (a statement or COMMIT running).
_IN_TRANSACTION = """
    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
    WHERE application_name = %s AND pid <> pg_backend_pid()
      AND state IN ('active', 'idle in transaction')
"""


@pytest.mark.postgres
@pytest.mark.timeout(300)
def test_terminate_backend_during_commits(pg_url: str, tmp_path, tally: Tally) -> None:
    import psycopg

    open_store(pg_url).close()  # the schema first: terminations are aimed at the workload
    failures_before = len(tally.failures)
    with psycopg.connect(pg_url, autocommit=True) as admin:
        for trial in range(trials(2)):
            problems, killed = _one_trial(admin, pg_url, tmp_path / f"trial-{trial}", trial)
            tally.record(problems, faulted=False)
            tally.faults += killed
    assert tally.failures[failures_before:] == []
    assert tally.faults > 0  # the trials really cut connections


def _one_trial(admin, pg_url: str, workdir, trial: int) -> tuple[list[str], int]:
    workdir.mkdir()
    root = f"tb-{uuid.uuid4().hex[:8]}"
    name = f"fault-{root}"
    ledger = workdir / "ledger"
    rng = random.Random(trial)
    proc = spawn_worker(
        with_application_name(pg_url, name),
        root,
        ledger,
        args=["--mode", rng.choice(("in_place", "rotate")), "--rounds", "30"],
    )
    killed, pause = 0, threading.Event()
    # terminations are aimed at the workload, not at the worker opening its store (a
    # store that cannot open is a configuration error, not a fault to carry on from)
    while proc.poll() is None and not ledger_acks([ledger]):
        pause.wait(0.005)
    while proc.poll() is None:
        rows = admin.execute(_IN_TRANSACTION, (name,)).fetchall()
        killed += sum(1 for (ok,) in rows if ok)
        pause.wait(rng.uniform(0.0, 0.03))
    code, err = finish(proc)
    problems = [] if code == 0 else [f"worker exited {code} under terminations: {err}"]
    acks = ledger_acks([ledger])
    store = open_store(pg_url)
    try:
        problems += recover(store, root, acks)
        problems += integrity_problems(store, root, acks)
    finally:
        store.close()
    return problems, killed
