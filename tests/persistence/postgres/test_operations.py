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

            threads = [threading.Thread(target=call, args=(kind, sid)) for sid in ids for kind in ("append", "end")]
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


READS = {
    "get_session": lambda s: s.get_session("s0"),
    "sessions": lambda s: s.sessions(),
    "transcript": lambda s: s.transcript("s0"),
    "archive": lambda s: s.archive("s0"),
    "resolve": lambda s: s.resolve("s0"),
    "children": lambda s: s.children("s0"),
    "cooldown": lambda s: s.cooldown("s0"),
    "current_lease": lambda s: s.current_lease("s0"),
    "leases": lambda s: s.leases(),
    "compactions": lambda s: s.compactions("s0"),
}


@pytest.fixture(params=["direct", "pgbouncer"])
def store_and_direct_url(request, pg_url):
    """(store URL, a direct URL to the same tables): reads run without a transaction
    block directly (the connection's own timeouts bound them) and inside one behind
    PgBouncer (timeouts per transaction)."""
    if request.param == "direct":
        return pg_url, pg_url
    from tests.pg import PG_URL, pgbouncer_store_url

    database = request.getfixturevalue("pgbouncer_db")
    return pgbouncer_store_url(database), PG_URL.rsplit("/", 1)[0] + f"/{database}"


def test_patience_bounds_every_read_behind_a_foreign_table_lock(store_and_direct_url):
    url, direct = store_and_direct_url
    store = open_store(url, patience_s=PATIENCE_S)
    try:
        store.create_session("s0")
        with psycopg.connect(direct) as foreign:  # a transaction, open until rollback
            foreign.execute(
                "LOCK TABLE sessions, messages, leases, cooldowns, compactions IN ACCESS EXCLUSIVE MODE"
            )  # not even plain reads may proceed
            start = threading.Barrier(len(READS))
            outcomes: dict[str, tuple[float, BaseException | None]] = {}

            def call(name: str) -> None:
                start.wait(timeout=30)
                began = time.monotonic()
                try:
                    READS[name](store)
                    error = None
                except BaseException as exc:  # recorded, asserted below
                    error = exc
                outcomes[name] = (time.monotonic() - began, error)

            threads = [threading.Thread(target=call, args=(name,)) for name in READS]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            foreign.rollback()
        assert sorted(outcomes) == sorted(READS)
        for name, (waited, error) in outcomes.items():
            assert isinstance(error, StoreBusyError), (name, error)
            assert "lock" in str(error) and "patience_s" in str(error), str(error)
            assert waited <= PATIENCE_S + SLACK_S, f"{name} waited {waited:.2f}s: {error}"
        assert store.get_session("s0").id == "s0"  # the same store reads again
    finally:
        store.close()
