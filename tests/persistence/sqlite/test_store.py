"""SQLite-only behaviour: injected clock, busy handling, options, files, closing."""

from __future__ import annotations

import os
import sqlite3
import stat

import pytest

from persistence import open_store
from persistence.sqlite import SqliteStore
from persistence.sqlite._driver import WAL_AUTOCHECKPOINT_PAGES
from protocol import (
    ConfigurationError,
    InvalidArgumentError,
    Message,
    StoreBusyError,
    TranscriptError,
)
from tests.persistence.contract.db import snapshot


class FakeClock:
    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def test_injected_clock_drives_lease_expiry_without_sleeping(sqlite_path):
    clock = FakeClock()
    store = SqliteStore(sqlite_path, clock=clock)
    try:
        store.create_session("s")
        lease = store.acquire_lease("s", "A", 10)
        assert (lease.acquired_at, lease.expires_at) == (clock.now, clock.now + 10)
        clock.now += 9.999
        assert store.current_lease("s") == lease
        assert store.acquire_lease("s", "B", 10) is None
        clock.now += 0.001  # exactly at expires_at: expired
        assert store.current_lease("s") is None
        assert store.renew_lease(lease, 10) is None
        taken = store.acquire_lease("s", "B", 5)
        assert taken.token == 2 and taken.acquired_at == clock.now
        assert store.leases() == [taken]
        assert store.get_session("s").created_at == 1_000_000.0
    finally:
        store.close()


def test_write_waits_for_lock_then_reports_busy(sqlite_path):
    store = SqliteStore(sqlite_path, patience_s=0.3)
    try:
        store.create_session("s")
        store.append("s", Message("user", "before"))
        before = snapshot("sqlite", sqlite_path)
        other = sqlite3.connect(sqlite_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreBusyError):
                store.append("s", Message("user", "blocked"))
            # WAL: reads go on while another connection holds the write lock
            assert [m.content for m in store.transcript("s")] == ["before"]
        finally:
            other.rollback()
            other.close()
        assert snapshot("sqlite", sqlite_path) == before
        assert store.append("s", Message("user", "after"))[0].seq == 2
    finally:
        store.close()


def test_missing_database_with_create_false(tmp_path):
    with pytest.raises(ConfigurationError):
        SqliteStore(str(tmp_path / "absent.db"), create=False)
    assert not (tmp_path / "absent.db").exists()
    with pytest.raises(ConfigurationError):
        SqliteStore(str(tmp_path / "no" / "such" / "dir.db"))


def test_not_a_database_is_a_configuration_error(tmp_path):
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ConfigurationError) as caught:
        SqliteStore(str(path))
    assert isinstance(caught.value.__cause__, sqlite3.Error)


@pytest.mark.parametrize(
    "options",
    [
        {"patience_s": -1},
        {"patience_s": float("nan")},
        {"patience_s": 1e300},
        {"max_content_bytes": 0},
        {"max_content_bytes": "big"},
        {"max_content_bytes": 2**40},
    ],
    ids=repr,
)
def test_bad_options_rejected(sqlite_path, options):
    with pytest.raises(InvalidArgumentError):  # a value out of its documented range
        SqliteStore(sqlite_path, **options)
    with pytest.raises(ConfigurationError):
        SqliteStore(sqlite_path, synchronous="SOMETIMES")


def test_sqlite_url_and_wal_mode(tmp_path):
    path = tmp_path / "url.db"
    store = open_store(f"sqlite:///{path}")
    try:
        assert isinstance(store, SqliteStore)
        store.create_session("s")
    finally:
        store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"sessions", "messages", "leases", "cooldowns", "compactions", "schema_version"} <= names
    finally:
        conn.close()


def test_sidecar_files_private_even_with_permissive_umask(sqlite_path):
    previous = os.umask(0)
    try:
        store = SqliteStore(sqlite_path)
    finally:
        os.umask(previous)
    try:
        store.create_session("s")
        store.append("s", Message("user", "secret"))
        for suffix in ("", "-wal", "-shm"):
            assert os.path.exists(sqlite_path + suffix)
            assert stat.S_IMODE(os.stat(sqlite_path + suffix).st_mode) == 0o600, suffix
    finally:
        store.close()


def test_closed_store_refuses_work_and_close_is_idempotent(sqlite_path):
    store = SqliteStore(sqlite_path)
    store.create_session("s")
    store.close()
    store.close()
    with pytest.raises(TranscriptError):
        store.append("s", Message("user", "x"))
    with pytest.raises(TranscriptError):
        store.transcript("s")


def test_seq_uniqueness_is_enforced_by_the_database(sqlite_path):
    store = SqliteStore(sqlite_path)
    try:
        store.create_session("s")
        store.append("s", Message("user", "x"))
    finally:
        store.close()
    conn = sqlite3.connect(sqlite_path)
    try:
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(
                "INSERT INTO messages (session_id, seq, role, content, created_at) VALUES ('s', 1, 'user', '\"y\"', 0)"
            )
        with pytest.raises(sqlite3.IntegrityError, match="messages_role_valid"):
            conn.execute(
                "INSERT INTO messages (session_id, seq, role, content, created_at) VALUES ('s', 2, 'robot', '\"y\"', 0)"
            )
    finally:
        conn.close()


def test_json_columns_written_by_other_tools_read_back_as_json(sqlite_path):
    """Rows the store did not write itself (spaced JSON, say from the sqlite3 shell) read
    back as their JSON values; only what no JSON parser accepts is an error."""
    store = open_store(sqlite_path)
    try:
        store.create_session("s")
        store.append("s", Message("user", "written by the store"))
        conn = sqlite3.connect(sqlite_path, isolation_level=None)
        try:
            conn.execute(
                "INSERT INTO messages (session_id, seq, role, content, tool_calls, meta, created_at) "
                'VALUES (\'s\', 2, \'assistant\', \' [ {"type": "text", "text": "hi"} ] \', '
                '\'[{"id": "c1"}]  \', \'\n{ "k" : [1, 2] }\n\', 0)'
            )
            conn.execute("UPDATE sessions SET next_seq = 3 WHERE id = 's'")
        finally:
            conn.close()
        read = store.transcript("s")
        assert read[0].content == "written by the store" and dict(read[0].meta) == {}
        assert read[1].content == [{"type": "text", "text": "hi"}]
        assert read[1].tool_calls == [{"id": "c1"}]
        assert dict(read[1].meta) == {"k": [1, 2]}
        conn = sqlite3.connect(sqlite_path, isolation_level=None)
        try:
            conn.execute("UPDATE messages SET meta = '{} trailing' WHERE seq = 1")
        finally:
            conn.close()
        with pytest.raises(ValueError):
            store.transcript("s")
    finally:
        store.close()


@pytest.mark.timeout(120)
def test_wal_is_checkpointed_at_its_threshold_and_reused(sqlite_path):
    """The WAL is copied back every `WAL_AUTOCHECKPOINT_PAGES` pages, not SQLite's 1,000:
    the file grows past 1,000 pages, and stays near the threshold (reset and reused)."""
    store = open_store(sqlite_path, synchronous="OFF")  # the same WAL, written faster
    try:
        store.create_session("s")
        conn = sqlite3.connect(sqlite_path)
        try:
            frame = conn.execute("PRAGMA page_size").fetchone()[0] + 24
        finally:
            conn.close()
        sizes = []
        for _ in range(700):  # ~10 pages a commit: past the threshold at least once
            store.append("s", [Message("user", "x" * 2000)] * 10)
            sizes.append(os.path.getsize(sqlite_path + "-wal"))
        assert max(sizes) > 1500 * frame
        assert max(sizes) < (WAL_AUTOCHECKPOINT_PAGES + 200) * frame
        assert sizes.index(max(sizes)) < len(sizes) - 1  # it stopped growing: reused from the start
    finally:
        store.close()


def test_json_columns_stored_as_blobs_by_other_tools_read_back_as_json(sqlite_path):
    """A tool binding bytes (UTF-8 JSON) stores BLOBs in the TEXT columns: they read
    back as their JSON values, as json.loads reads bytes."""
    store = open_store(sqlite_path)
    try:
        store.create_session("s")
        store.append("s", Message("user", "written by the store", meta={"k": 1}))
        conn = sqlite3.connect(sqlite_path, isolation_level=None)
        try:
            conn.execute("UPDATE messages SET content = CAST(content AS BLOB), meta = CAST(meta AS BLOB)")
            assert conn.execute("SELECT typeof(content), typeof(meta) FROM messages").fetchone() == ("blob", "blob")
        finally:
            conn.close()
        (read,) = store.transcript("s")
        assert read.content == "written by the store" and dict(read.meta) == {"k": 1}
    finally:
        store.close()
