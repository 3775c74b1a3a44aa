"""Several processes, each with its own `SessionRegistry` on one PostgreSQL schema.

Each process gets-or-creates the same sessions, appends through its handles and
asks for compactions in both modes; the registries race for leases, follow each
other's rotations (redirected appends, ADOPTED outcomes) and never fork. The
parent then runs the same database checks as the raw-store process tests.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from persistence.postgres import PostgresStore
from protocol import CompressionStatus
from tests.persistence.postgres.test_processes import check_integrity, run_processes
from tests.pg import pg_rows

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

ROOTS = ["discord:1", "telegram:2"]
PROCESSES = 3
ITERATIONS = 40


class RecordingHeadTail:
    """HeadTailCompressor that remembers the id of every message it was given."""

    name = "recording-head-tail"

    def __init__(self) -> None:
        from actors import HeadTailCompressor

        self._inner = HeadTailCompressor(keep_last=2)
        self.seen: set[int] = set()

    def compress(self, messages, *, target_tokens, cancel):
        self.seen.update(m.id for m in messages)
        return self._inner.compress(messages, target_tokens=target_tokens, cancel=cancel)


def registry_worker(url: str, worker_no: int, barrier: Any, out: Any) -> None:
    from actors import CompactionPolicy, SessionRegistry

    rng = random.Random(worker_no)
    acked, outcomes = [], []
    compressor = RecordingHeadTail()
    policy = CompactionPolicy(lease_ttl_s=10.0, max_compaction_s=20.0, ask_timeout_s=20.0, cooldown_s=0.0, keep_last=2)
    store = PostgresStore(url, max_size=4)
    try:
        with SessionRegistry(store, compressor=compressor, policy=policy, holder=f"registry{worker_no}") as registry:
            barrier.wait(30)
            handles = {root: registry.session(root, source="test") for root in ROOTS}
            for i in range(ITERATIONS):
                handle = handles[rng.choice(ROOTS)]
                role = "user" if i % 2 == 0 else "assistant"
                stored = handle.append(role, f"r{worker_no}-{i}")
                acked.append((stored.session_id, stored.id, stored.seq, stored.content, 0.0, 0.0))
                if i % 5 == 4:
                    outcome = handle.compress(mode=rng.choice(["in_place", "rotate"]))
                    record_id = outcome.record.id if outcome.record else None
                    outcomes.append((outcome.status.value, outcome.reason, record_id))
        out.put(
            {
                "worker": worker_no,
                "acked": acked,
                "commits": [],
                "outcomes": outcomes,
                "compressor_inputs": sorted(compressor.seen),
            }
        )
    except BaseException as exc:  # reported to the parent, which fails the test
        out.put({"worker": worker_no, "error": repr(exc)})
    finally:
        store.close()


def test_registries_in_processes_share_sessions_without_forks_or_loss(pg_url: str):
    PostgresStore(pg_url).close()  # schema ready before the race starts
    results = run_processes([(registry_worker, (pg_url, n)) for n in range(PROCESSES)])
    counts = check_integrity(pg_url, results)
    assert counts["acked"] == PROCESSES * ITERATIONS

    statuses = Counter(status for r in results for status, _, _ in r["outcomes"])
    committed = [
        rid
        for r in results
        for status, _, rid in r["outcomes"]
        if status in (CompressionStatus.COMPACTED.value, CompressionStatus.ROTATED.value)
    ]
    assert committed, f"no compaction committed: {statuses}"
    assert all(rid is not None for rid in committed)
    records = {row[0] for row in pg_rows(pg_url, "SELECT id FROM compactions")}
    assert records == set(committed), "a committed outcome without its record, or an unreported commit"
    assert not statuses.get(CompressionStatus.FAILED.value), statuses
    # Seqs follow commit order: every message a commit archived as compacted (seq <=
    # watermark) was in the transcript its compressor read; none slipped under a watermark.
    seen = {i for r in results for i in r["compressor_inputs"]}
    compacted = {row[0] for row in pg_rows(pg_url, "SELECT id FROM messages WHERE state = 'compacted'")}
    assert compacted, "no message was compacted"
    assert compacted <= seen, f"compacted without being compressed: {sorted(compacted - seen)[:10]}"
    for root in ROOTS:  # one live tip per lineage
        live = pg_rows(
            pg_url,
            "SELECT count(*) FROM sessions WHERE ended_at IS NULL AND (id = %s OR id LIKE %s)",
            (root, f"{root}~%"),
        )[0][0]
        assert live == 1
