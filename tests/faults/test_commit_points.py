"""kill -9 at every commit point of every write, on both backends.

A worker process runs with ``SESSION_ACTORS_KILL_AT`` set (`persistence._killpoints`):
the store SIGKILLs it at one named point of one kind of transaction. Each trial
checks that the worker really died there, that the transaction is atomic at that
point (committed only once COMMIT returned), that a new registry recovers the
session (the dead holder's lease expires, a compaction commits), and that the
store matches the worker's ledger: 0 lost, 0 forks, 0 seq gaps, 0 duplicates.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence

import pytest

from persistence import open_store
from persistence._killpoints import POINTS

from .harness import (
    WORKER_HOLDER,
    Tally,
    finish,
    integrity_problems,
    ledger_acks,
    lineage_compactions,
    lineage_rows,
    recover,
    spawn_worker,
    trials,
)

#: (operation, point): every point each write reaches; the fence only in a compaction.
CASES = [("commit_compaction", p) for p in POINTS] + [
    (op, p) for op in ("append", "acquire_lease", "release_lease") for p in POINTS if p != "after_fence"
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("operation", "point"), CASES, ids=[f"{o}-{p}" for o, p in CASES])
def test_kill_at_commit_point(store_url: str, tmp_path, operation: str, point: str, tally: Tally) -> None:
    failures_before = len(tally.failures)
    for trial in range(trials()):
        rng = random.Random(f"{operation}:{point}:{trial}")
        tally.record(_one_trial(store_url, tmp_path / f"trial-{trial}", operation, point, rng))
    assert tally.failures[failures_before:] == []


@pytest.mark.timeout(300)
@pytest.mark.parametrize("point", [p for p in POINTS if p != "after_fence"])
def test_kill_at_commit_point_of_a_submitted_append(store_url: str, tmp_path, point: str, tally: Tally) -> None:
    """The same with the worker on an event loop (``append_async``, ``compress_async``):
    its appends are submitted to the group commit and acknowledged by the writer's
    completions, which the SQLite writer may hold until the next batch's COMMIT."""
    failures_before = len(tally.failures)
    for trial in range(trials()):
        rng = random.Random(f"submitted:{point}:{trial}")
        tally.record(_one_trial(store_url, tmp_path / f"trial-{trial}", "append", point, rng, ["--async"]))
    assert tally.failures[failures_before:] == []


def _one_trial(
    db: str, workdir, operation: str, point: str, rng: random.Random, worker_args: Sequence[str] = ()
) -> list[str]:
    workdir.mkdir()
    root = f"kp-{uuid.uuid4().hex[:8]}"
    ledger = workdir / "ledger"
    # appends: kill at a random one of the first rounds; a lease or a commit: the first or second
    nth = rng.randint(1, 6) if operation == "append" else rng.randint(1, 2)
    mode = rng.choice(("in_place", "rotate"))
    code, err = finish(
        spawn_worker(
            db,
            root,
            ledger,
            kill_at=f"{operation}:{point}:{nth}",
            args=["--mode", mode, "--rounds", "12", *worker_args],
        )
    )
    if code != -9:
        return [f"worker was not killed at {operation}:{point}:{nth} (exit {code}): {err}"]
    acks = ledger_acks([ledger])
    store = open_store(db)
    try:
        problems = _atomic(store, root, operation, point, nth)
        problems += recover(store, root, acks)
        problems += integrity_problems(store, root, acks)
    finally:
        store.close()
    return problems


def _atomic(store, root: str, operation: str, point: str, nth: int) -> list[str]:
    """The killed transaction is durable exactly when its COMMIT returned."""
    committed = point == "after_commit"
    if operation == "append":  # one append per round: the nth is round nth-1
        text = f"ask {WORKER_HOLDER} {nth - 1}"
        found = any(r.text == text for r in lineage_rows(store, root))
        return [] if found == committed else [f"append killed at {point}: row present={found}"]
    if operation == "commit_compaction":  # the worker's nth commit was the one killed
        mine = [r for r in lineage_compactions(store, root) if r.holder == WORKER_HOLDER]
        expected = nth if committed else nth - 1
        return (
            []
            if len(mine) == expected
            else [f"commit killed at {point}: {len(mine)} compactions by the worker, expected {expected}"]
        )
    return []
