"""One `PostgresStore` (one pool) shared by many threads: writers append to one
session while a compactor thread commits in place and by rotation. The same
database checks as the process tests: seqs in commit order without gaps, every
archived message in its compactor's snapshot, tails carried, nothing lost."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from persistence.postgres import PostgresStore
from protocol import Message
from tests.persistence.postgres.test_processes import (
    append_following,
    check_integrity,
    compact_once,
)

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

WRITERS = 6
APPENDS = 40
ROUNDS = 8


def test_threads_share_a_pool_while_compactions_commit(pg_url: str):
    store = PostgresStore(pg_url, max_size=WRITERS + 2)
    results: list[dict[str, Any]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(WRITERS + 1)
    try:
        store.create_session("hot")
        store.append("hot", [Message("system", "rules"), Message("user", "first ask")])

        def writer(n: int) -> None:
            acked, sid = [], "hot"
            try:
                start.wait(10)
                for i in range(APPENDS):
                    sid, stored, t0, t1 = append_following(store, sid, Message("assistant", f"t{n}-{i}"))
                    acked.append((stored.session_id, stored.id, stored.seq, stored.content, t0, t1))
            except BaseException as exc:  # asserted below
                errors.append(exc)
            results.append({"acked": acked, "commits": []})

        def compactor() -> None:
            commits, sid = [], "hot"
            try:
                start.wait(10)
                for i in range(ROUNDS):
                    sid = store.resolve(sid)
                    mode = "rotate" if i % 2 else "in_place"
                    outcome = compact_once(store, sid, "compactor", mode, 30.0, True)
                    if isinstance(outcome, dict):
                        commits.append(outcome)
            except BaseException as exc:  # asserted below
                errors.append(exc)
            results.append({"acked": [], "commits": commits})

        threads = [threading.Thread(target=writer, args=(n,), name=f"writer-{n}") for n in range(WRITERS)]
        threads.append(threading.Thread(target=compactor, name="compactor"))
        for t in threads:
            t.start()
        for t in threads:
            t.join(45)
        assert not [t.name for t in threads if t.is_alive()]
    finally:
        store.close()
    assert not errors, errors
    counts = check_integrity(pg_url, results)
    assert counts["acked"] == WRITERS * APPENDS
    assert counts["commits"] >= ROUNDS // 2
    assert counts["tails"] > 0
