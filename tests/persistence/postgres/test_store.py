"""PostgreSQL-specific behaviour of `PostgresStore` beyond the contract suite:
opening (driver, URL, server, concurrent migration), schema isolation, busy and
broken connections, and closing."""

from __future__ import annotations

import multiprocessing
import queue
import sys
import threading
import uuid

import pytest

from persistence import open_store
from persistence._migrations import latest_version
from persistence.postgres import PostgresStore
from protocol import (
    ConfigurationError,
    Message,
    SchemaVersionError,
    StoreBusyError,
    TranscriptError,
)
from tests.pg import (
    PG_URL,
    isolated_postgres_url,
    pg_rows,
    table_snapshot,
    with_application_name,
)

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(30)]

SPAWN = multiprocessing.get_context("spawn")


def _schema_of(url: str) -> str:
    return pg_rows(url, "SELECT current_schema()")[0][0]


def test_open_store_dispatches_postgres_urls(pg_url: str):
    store = open_store(pg_url)
    try:
        assert isinstance(store, PostgresStore)
        assert store.create_session("s").id == "s"
    finally:
        store.close()


def test_missing_driver_is_a_configuration_error_naming_the_extra(pg_url: str, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # makes `import psycopg` raise ImportError
    with pytest.raises(ConfigurationError, match=r"session-actors\[postgres\]"):
        open_store(pg_url)


def test_unreachable_server_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="cannot connect") as info:
        PostgresStore("postgresql://postgres:s3cret@127.0.0.1:1/test", connect_timeout_s=0.5)
    assert "s3cret" not in str(info.value)


def test_malformed_url_is_a_configuration_error():
    with pytest.raises(ConfigurationError):
        PostgresStore("postgresql://127.0.0.1:5432/test?no_such_option=1")


def test_tables_live_only_in_the_urls_schema(pg_url: str):
    """All SQL is unqualified: the store honours the URL's search_path."""
    with isolated_postgres_url() as other_url:
        one, two = PostgresStore(pg_url), PostgresStore(other_url)
        try:
            one.create_session("shared-name")
            one.append("shared-name", Message("user", "only in one"))
            assert two.get_session("shared-name") is None
            two.create_session("shared-name")
            assert two.transcript("shared-name") == []
            assert [m.content for m in one.transcript("shared-name")] == ["only in one"]
        finally:
            one.close()
            two.close()
        schema = _schema_of(pg_url)
        rows = pg_rows(pg_url, "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))
        tables = {r[0] for r in rows}
        assert {"sessions", "messages", "leases", "cooldowns", "compactions", "schema_version"} <= tables


def test_database_enforces_unique_session_seq(pg_url: str):
    import psycopg

    store = PostgresStore(pg_url)
    try:
        store.create_session("s")
        store.append("s", Message("user", "one"))
    finally:
        store.close()
    with pytest.raises(psycopg.errors.UniqueViolation) as info:
        pg_rows(
            pg_url,
            "INSERT INTO messages (session_id, seq, role, content, created_at) VALUES ('s', 1, 'user', '\"dup\"', 0)",
        )
    assert info.value.diag.constraint_name == "messages_session_seq_unique"


def _open_and_report(url: str, barrier, out) -> None:
    try:
        barrier.wait(30)
        store = PostgresStore(url, min_size=1, max_size=1)
        out.put(store.schema_version)
        store.close()
    except BaseException as exc:  # reported to the parent
        out.put(repr(exc))


def test_concurrent_first_opens_migrate_exactly_once(pg_url: str):
    barrier, out = SPAWN.Barrier(4), SPAWN.Queue()
    procs = [SPAWN.Process(target=_open_and_report, args=(pg_url, barrier, out)) for _ in range(4)]
    for p in procs:
        p.start()
    try:
        reports = [out.get(timeout=30) for _ in procs]
    except queue.Empty:
        pytest.fail("an opener did not report")
    finally:
        for p in procs:
            p.join(10)
        out.close()
        out.join_thread()
    latest = latest_version("postgres")
    assert reports == [latest] * 4
    assert pg_rows(pg_url, "SELECT version FROM schema_version ORDER BY version") == [
        (v,) for v in range(1, latest + 1)
    ]


def test_newer_schema_is_refused_before_anything_is_written(pg_url: str):
    PostgresStore(pg_url).close()
    pg_rows(pg_url, "INSERT INTO schema_version (version, applied_at) VALUES (99, 0)")
    before = table_snapshot(pg_url)
    with pytest.raises(SchemaVersionError) as info:
        PostgresStore(pg_url)
    assert (info.value.found, info.value.supported) == (99, latest_version("postgres"))
    assert table_snapshot(pg_url) == before


def test_append_behind_a_held_row_lock_is_busy_and_writes_nothing(pg_url: str):
    import psycopg

    store = PostgresStore(pg_url, patience_s=0.5)
    try:
        store.create_session("s")
        store.append("s", Message("user", "before"))
        with psycopg.connect(pg_url) as blocker:
            blocker.execute("SELECT * FROM sessions WHERE id = 's' FOR UPDATE")
            # skipped as locked until patience ran out, or (on a loaded machine) cut by the
            # statement timeout patience sets: both name the lock and the patience spent
            with pytest.raises(StoreBusyError, match=r"patience_s.*|lock.* by another transaction") as busy:
                store.append("s", Message("user", "blocked"))
            assert "another transaction" in str(busy.value) and "patience_s" in str(busy.value)
            blocker.rollback()
        assert [m.content for m in store.transcript("s")] == ["before"]
        # The lock gone, the same call goes through and continues the seqs.
        assert store.append("s", Message("user", "after"))[0].seq == 2
    finally:
        store.close()


def test_terminated_connections_are_replaced_and_writes_retried(pg_url: str):
    app = f"kill-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(with_application_name(pg_url, app), min_size=2, max_size=2)
    try:
        store.create_session("s")
        store.append("s", Message("user", "one"))
        killed = pg_rows(
            pg_url, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s", (app,)
        )
        assert killed[0][0] >= 1
        # Lost before COMMIT was sent, so the store retries on a fresh connection.
        assert store.append("s", Message("user", "two"))[0].seq == 2
        assert [m.content for m in store.transcript("s")] == ["one", "two"]
    finally:
        store.close()


def test_close_joins_pool_threads_and_is_idempotent(pg_url: str):
    before = set(threading.enumerate())
    store = PostgresStore(pg_url, min_size=2, max_size=4)
    assert set(threading.enumerate()) - before, "expected the pool to run worker threads"
    store.close()
    store.close()
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]
    with pytest.raises(TranscriptError, match="closed"):
        store.get_session("s")


def test_bad_pool_sizes_are_rejected_without_connecting():
    with pytest.raises(ValueError):
        PostgresStore(PG_URL, min_size=3, max_size=2)
