"""PostgreSQL under operational stress: ``patience_s`` bounds every call (lock waits
included, on the pool and the group-commit writer alike) and names the lock."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from persistence import open_store
from protocol import Message, StoreBusyError

pytestmark = pytest.mark.timeout(120)

PATIENCE_S = 1.0
SLACK_S = 0.7  # "plus one statement", on a loaded 2-core machine
SESSIONS = 6


def test_patience_bounds_every_call_behind_a_foreign_row_lock(pg_url):
    store = open_store(pg_url, patience_s=PATIENCE_S)
    try:
        ids = [f"s{i}" for i in range(SESSIONS)]
        for sid in ids:
            store.create_session(sid)
        with psycopg.connect(pg_url) as foreign:  # a transaction, open until rollback
            foreign.execute("SELECT id FROM sessions WHERE id = ANY(%s) FOR UPDATE", (ids,))
            start = threading.Barrier(2 * SESSIONS)
            outcomes: list[tuple[str, float, BaseException | None]] = []

            def call(kind: str, sid: str) -> None:
                start.wait(timeout=30)
                began = time.monotonic()
                try:
                    if kind == "append":  # the group-commit writer's connection
                        store.append(sid, Message("user", "blocked"))
                    else:  # the pool's connections
                        store.end_session(sid, "done")
                    error = None
                except BaseException as exc:  # recorded, asserted below
                    error = exc
                outcomes.append((kind, time.monotonic() - began, error))

            threads = [threading.Thread(target=call, args=(kind, sid))
                       for sid in ids for kind in ("append", "end")]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            foreign.rollback()
        assert len(outcomes) == 2 * SESSIONS
        for kind, waited, error in outcomes:
            assert isinstance(error, StoreBusyError), (kind, error)
            assert "lock" in str(error) and "patience_s" in str(error), str(error)
            assert waited <= PATIENCE_S + SLACK_S, f"{kind} waited {waited:.2f}s: {error}"
        assert store.append("s0", Message("user", "after"))[0].seq == 1  # nothing was written
    finally:
        store.close()
