"""SIGSTOP a lease holder mid-summary until past its TTL: it must never publish.

The worker's compressor signals (a marker file) once it runs under the lease; the
trial freezes the worker with SIGSTOP, waits until the lease has expired on the
store's clock, takes the session over from this process (append + a committed
compaction), then SIGCONTs the worker. The thawed worker must end its attempt as
``lease_lost`` (its own keeper notices, or the fence refuses the commit), carry on
and exit cleanly; its frozen token never appears in a compaction record, tokens
only grow, and the store matches both ledgers.
"""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from actors.simulate._ledger import read_ledgers
from persistence import open_store

from .harness import (
    TTL_S,
    WORKER_HOLDER,
    Tally,
    finish,
    integrity_problems,
    ledger_acks,
    lineage_compactions,
    live_leases,
    recover,
    spawn_worker,
    trials,
    wait_until,
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["in_place", "rotate"])
def test_freeze_past_ttl(store_url: str, tmp_path, mode: str, tally: Tally) -> None:
    failures_before = len(tally.failures)
    for trial in range(trials()):
        tally.record(_one_trial(store_url, tmp_path / f"trial-{trial}", mode))
    assert tally.failures[failures_before:] == []


def _one_trial(db: str, workdir, mode: str) -> list[str]:
    workdir.mkdir()
    root = f"fz-{uuid.uuid4().hex[:8]}"
    ledger, marker = workdir / "ledger", workdir / "holding"
    proc = spawn_worker(
        db, root, ledger, args=["--mode", mode, "--rounds", "6", "--lease-file", str(marker), "--compress-delay", "3"]
    )
    store = open_store(db)
    problems: list[str] = []
    try:
        if not wait_until(marker.exists, 60):
            proc.kill()
            return [f"the worker never held the lease: {finish(proc)}"]
        frozen = [lease for lease in live_leases(store, root) if lease.holder == WORKER_HOLDER]
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            if not wait_until(lambda: not live_leases(store, root), TTL_S + 10):
                problems.append("the frozen worker's lease never expired")
            acks: list = []
            problems += recover(store, root, acks)  # takes the session over while it is frozen
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        code, err = finish(proc)
        if code != 0:
            problems.append(f"thawed worker exited {code}: {err}")
        outcomes = [line[1] for line in read_ledgers([ledger]) if line[0] == "outcome"]
        if not outcomes or outcomes[0] != "lease_lost":
            problems.append(f"the frozen attempt ended {outcomes[:1]}, not lease_lost")
        records = lineage_compactions(store, root)
        frozen_tokens = {(lease.session_id, lease.token) for lease in frozen}
        if any((r.session_id, r.token) in frozen_tokens for r in records):
            problems.append("the frozen holder's token published a compaction")
        for sid in {r.session_id for r in records}:
            tokens = [r.token for r in records if r.session_id == sid]
            if tokens != sorted(set(tokens)):
                problems.append(f"tokens of {sid} not strictly increasing: {tokens}")
        problems += integrity_problems(store, root, ledger_acks([ledger]) + acks)
    finally:
        store.close()
    return problems
