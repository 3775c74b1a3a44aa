"""Contract: a session's live rows are the seqs from ``sessions.live_from`` on.

An append then writes one per-session index (``UNIQUE(session_id, seq)``), and a
transcript read range-scans it from ``live_from``. What makes that exact: no row
below ``live_from`` is ever live. Checked here in the database after compactions
in both modes, retractions and erasure, with the reads the store serves.
"""

from __future__ import annotations

import sqlite3

import pytest

from persistence._queries import load_queries
from protocol import Message
from tests.persistence.contract.db import execute

pytestmark = pytest.mark.timeout(60)

SUMMARY = Message("user", "[CONTEXT COMPACTION] summary")


def _live_from(backend: str, url: str, sid: str) -> int:
    [(live_from,)] = execute(backend, url, f"SELECT live_from FROM sessions WHERE id = '{sid}'")
    return int(live_from)


def _live_below(backend: str, url: str, sid: str) -> int:
    """Live rows of ``sid`` below its live_from: always none."""
    [(count,)] = execute(
        backend,
        url,
        f"""
        SELECT count(*) FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
        WHERE s.id = '{sid}' AND m.state = 'live' AND m.seq < s.live_from""",
    )
    return int(count)


def _compact(store, sid: str, watermark: int, mode: str = "in_place"):
    lease = store.acquire_lease(sid, "h", 30)
    try:
        return store.commit_compaction(lease, watermark=watermark, compacted=[SUMMARY], mode=mode)
    finally:
        store.release_lease(lease)


def test_a_new_session_reads_from_its_first_seq(store, store_url, backend):
    store.create_session("s")
    store.append("s", [Message("user", "u1"), Message("assistant", "a1")])
    assert _live_from(backend, store_url, "s") == 1
    assert [m.content for m in store.transcript("s")] == ["u1", "a1"]


def test_an_in_place_compaction_moves_live_from_to_its_first_new_row(store, store_url, backend):
    store.create_session("s")
    store.append("s", [Message("user", f"u{i}") for i in range(1, 5)])  # seqs 1..4
    _compact(store, "s", watermark=2)  # summary at 5, u3 and u4 copied to 6 and 7
    assert _live_from(backend, store_url, "s") == 5
    store.append("s", Message("user", "u5"))
    assert [(m.seq, m.content) for m in store.transcript("s")] == [
        (5, SUMMARY.content),
        (6, "u3"),
        (7, "u4"),
        (8, "u5"),
    ]
    assert [m.seq for m in store.archive("s")] == [1, 2, 3, 4]
    _compact(store, "s", watermark=8)  # again: everything before 9 leaves
    assert _live_from(backend, store_url, "s") == 9
    assert [m.content for m in store.transcript("s")] == [SUMMARY.content]
    assert _live_below(backend, store_url, "s") == 0


def test_a_rotation_leaves_the_parent_with_no_live_range(store, store_url, backend):
    store.create_session("p")
    store.append("p", [Message("user", "u1"), Message("assistant", "a1"), Message("user", "u2")])
    record = _compact(store, "p", watermark=2, mode="rotate")
    child = record.child_session_id
    assert _live_from(backend, store_url, "p") == 4  # the parent's next_seq: nothing live
    assert store.transcript("p") == []
    assert _live_from(backend, store_url, child) == 1
    assert [m.content for m in store.transcript(child)] == [SUMMARY.content, "u2"]
    assert [m.seq for m in store.archive("p")] == [1, 2, 3]


def test_retractions_pop_the_live_tip_and_stop_at_the_live_range(store, store_url, backend):
    store.create_session("s")
    store.append("s", [Message("user", "u1"), Message("user", "u2")])
    _compact(store, "s", watermark=2)  # summary at 3
    store.append("s", Message("assistant", "a1"))
    assert store.retract("s").content == "a1"
    assert store.retract("s").content == SUMMARY.content
    assert store.retract("s") is None  # u1 and u2 are archived: nothing below is live
    assert store.transcript("s") == []
    store.append("s", Message("user", "again"))
    assert [m.content for m in store.transcript("s")] == ["again"]
    assert _live_below(backend, store_url, "s") == 0


def test_an_append_writes_one_per_session_index(store, store_url, backend):
    """The only index an append must insert into per session is the unique one; any
    other index on messages that leads with session_id would cost each append a
    B-tree insert and a dirty page of its own (what this schema version removed)."""
    store.create_session("s")
    if backend == "sqlite":
        leading = execute(
            backend,
            store_url,
            """
            SELECT l.name, l.partial FROM pragma_index_list('messages') AS l
            JOIN pragma_index_info(l.name) AS i ON i.seqno = 0 WHERE i.name = 'session_id'""",
        )
        assert [(name, partial) for name, partial in leading] == [("sqlite_autoindex_messages_1", 0)]
        # every other index skips a freshly appended row (no origin, not archived): partial
        others = execute(
            backend,
            store_url,
            """
            SELECT name, partial FROM pragma_index_list('messages')
            WHERE name <> 'sqlite_autoindex_messages_1'""",
        )
        assert others and all(partial == 1 for _, partial in others), others
        return
    rows = execute(
        backend,
        store_url,
        """
        SELECT indexname, indexdef FROM pg_indexes
        WHERE tablename = 'messages' AND schemaname = current_schema()""",
    )
    per_session = [name for name, definition in rows if "(session_id" in definition]
    assert per_session == ["messages_session_seq_unique"]
    # every other index skips a freshly appended row (live, no origin)
    others = {
        name: definition for name, definition in rows if name not in ("messages_pkey", "messages_session_seq_unique")
    }
    assert others and all(" WHERE " in definition for definition in others.values()), others


def test_the_sqlite_transcript_read_is_a_range_of_the_unique_index(sqlite_path):
    """The query plan the store's own transcript query gets: a seq range from live_from
    on the unique index, not a walk over every row the session ever had."""
    from persistence import open_store

    open_store(sqlite_path).close()
    query = load_queries("sqlite")["live_messages"]
    conn = sqlite3.connect(sqlite_path)
    try:
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + query, {"session_id": "s"})]
    finally:
        conn.close()
    assert any("USING INDEX sqlite_autoindex_messages_1 (session_id=? AND seq>?)" in step for step in plan), plan


def test_the_sqlite_readers_of_the_partial_indexes_still_use_them(sqlite_path):
    """Retention's prune and erasure's foreign-key check of copies name a value of the
    column, which implies the partial index's NOT NULL: both search it, not scan."""
    from persistence import open_store

    open_store(sqlite_path).close()
    prune = load_queries("sqlite")["prune_archive"]
    conn = sqlite3.connect(sqlite_path)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        plans = {
            "prune": [
                row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + prune, {"now": 0, "older_than": 0, "ids": None})
            ],
            "erase": [row[3] for row in conn.execute("EXPLAIN QUERY PLAN DELETE FROM messages WHERE session_id = 's'")],
        }
    finally:
        conn.close()
    assert any("USING INDEX messages_archived_idx (archived_at<?)" in step for step in plans["prune"]), plans
    assert any("USING COVERING INDEX messages_origin_idx (origin_id=?)" in step for step in plans["erase"]), plans
