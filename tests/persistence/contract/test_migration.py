"""Contract: a wave-1 database (schema version 1) is migrated in place on open.

The wave-1 database is built here the way the wave-1 code built it: the 0001
migration script, a ``schema_version`` row, and the rows that code wrote for an
in-place compaction and a rotation.
"""

from __future__ import annotations

import sqlite3

import pytest

from persistence import open_store
from persistence._migrations import latest_version, load_migrations
from protocol import Message
from tests.persistence.contract.db import execute, pg_connect

# (id, source, parent, created_at, ended_at, end_reason, epoch, next_seq)
WAVE1_SESSIONS = """
INSERT INTO sessions (id, source, parent_session_id, created_at, ended_at, end_reason, epoch, next_seq)
VALUES ('w', 'api', NULL, 10, NULL, NULL, 1, 6),
       ('r', 'web', NULL, 20, 50, 'compression', 1, 3),
       ('r~1', 'web', 'r', 50, NULL, NULL, 0, 2)
"""
# ids 1..8 in this order: 'w' compacted in place at t=30 (watermark 2, row 3 the tail,
# copied as row 5); 'r' rotated into 'r~1' at t=50
WAVE1_MESSAGES = """
INSERT INTO messages (session_id, seq, role, content, name, tool_call_id, tool_calls, meta,
                      created_at, state, origin_id)
VALUES ('w', 1, 'user', '"u1"', NULL, NULL, NULL, '{}', 11, 'compacted', NULL),
       ('w', 2, 'assistant', '"a1"', 'bot', NULL, NULL, '{"k":1}', 12, 'compacted', NULL),
       ('w', 3, 'user', '"u2"', NULL, NULL, NULL, '{}', 13, 'superseded', NULL),
       ('w', 4, 'user', '"[CONTEXT COMPACTION] sum"', NULL, NULL, NULL, '{}', 30, 'live', NULL),
       ('w', 5, 'user', '"u2"', NULL, NULL, NULL, '{}', 30, 'live', 3),
       ('r', 1, 'user', '"r1"', NULL, NULL, NULL, '{}', 21, 'compacted', NULL),
       ('r', 2, 'assistant', '"r2"', NULL, NULL, NULL, '{}', 22, 'compacted', NULL),
       ('r~1', 1, 'user', '"rsum"', NULL, NULL, NULL, '{}', 50, 'live', NULL)
"""
WAVE1_COMPACTIONS = """
INSERT INTO compactions (session_id, child_session_id, mode, token, holder, watermark,
                         archived_count, tail_count, compressor, started_at, committed_at)
VALUES ('w', NULL, 'in_place', 1, 'h', 2, 2, 1, 'c', 25, 30),
       ('r', 'r~1', 'rotate', 1, 'h', 2, 2, 0, 'c', 45, 50)
"""


def _build_wave1(backend: str, url: str) -> None:
    dialect = "sqlite" if backend == "sqlite" else "postgres"
    initial = load_migrations(dialect)[0]
    assert initial.version == 1
    rows = [WAVE1_SESSIONS, WAVE1_MESSAGES, WAVE1_COMPACTIONS]
    if backend == "sqlite":
        conn = sqlite3.connect(url)
        try:
            conn.executescript(initial.sql)
            conn.executescript(
                "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL);"
                "INSERT INTO schema_version VALUES (1, 5);"
            )
            for sql in rows:
                conn.execute(sql)
            conn.execute("UPDATE sqlite_sequence SET seq = 20 WHERE name = 'messages'")  # ids 9..20 were used
            conn.commit()
        finally:
            conn.close()
        return
    with pg_connect(url) as conn:
        conn.execute(initial.sql)
        conn.execute("CREATE TABLE schema_version (version integer PRIMARY KEY, applied_at double precision NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (1, 5)")
        for sql in rows:
            conn.execute(sql)


@pytest.fixture
def wave1_url(store_url, backend):
    _build_wave1(backend, store_url)
    return store_url


def test_wave1_database_is_migrated_and_keeps_everything(wave1_url, backend):
    dialect = "sqlite" if backend == "sqlite" else "postgres"
    store = open_store(wave1_url)
    try:
        assert execute(backend, wave1_url, "SELECT max(version) FROM schema_version") == [(latest_version(dialect),)]
        assert [m.content for m in store.transcript("w")] == ["[CONTEXT COMPACTION] sum", "u2"]
        assert store.transcript("w")[1].origin_id == 3
        archived = store.archive("w")
        assert [(m.seq, m.state, m.content, m.name, dict(m.meta)) for m in archived] == [
            (1, "compacted", "u1", None, {}),
            (2, "compacted", "a1", "bot", {"k": 1}),
            (3, "superseded", "u2", None, {}),
        ]
        assert store.resolve("r") == "r~1"
        assert [s.metadata for s in store.sessions()] == [{}, {}, {}]
        assert [s.incarnation for s in store.sessions()] == ["", "", ""]  # one shared, as before
        assert [len(store.compactions(s)) for s in ("w", "r")] == [1, 1]
        # when each wave-1 row left the live transcript: its compaction's commit time
        when = execute(backend, wave1_url, "SELECT id, archived_at FROM messages ORDER BY id")
        assert when == [(1, 30), (2, 30), (3, 30), (4, None), (5, None), (6, 50), (7, 50), (8, None)]
        # where each session's live rows start: its lowest live seq, else next_seq
        assert execute(backend, wave1_url, "SELECT id, live_from FROM sessions ORDER BY id") == [
            ("r", 3),
            ("r~1", 1),
            ("w", 4),
        ]
    finally:
        store.close()


def test_wave1_database_takes_the_new_operations(wave1_url, backend):
    store = open_store(wave1_url)
    try:
        [dev] = store.append("r~1", Message("developer", "new role"))
        assert dev.seq == 2
        if backend == "sqlite":
            assert dev.id == 21  # the id counter survived the table rebuild: never reused
        assert store.retract("r").content == "new role"
        assert store.update_metadata("r~1", {"user": "u"}).metadata == {"user": "u"}
        assert [s.id for s in store.sessions(metadata={"user": "u"})] == ["r~1"]
        # the wave-1 archive left the transcript at t=30..50 (1970): a 30-day policy
        # prunes it; the message retracted just now stays
        assert store.prune_archive(older_than_s=30 * 86400) == 5
        assert [m.state for m in store.archive("r~1")] == ["retracted"]
        assert {m.state for m in store.archive("w")} == {"pruned"}
        assert store.delete_session("r") == 4
        assert [s.id for s in store.sessions()] == ["w"]
    finally:
        store.close()


def test_wave1_text_is_indexed_and_its_compactions_detailed(wave1_url):
    store = open_store(wave1_url)
    try:
        # every earlier row is searchable; the carried "u2" is found once, at its live copy
        assert [(h.session_id, h.seq, h.archived) for h in store.search("u2")] == [("w", 5, False)]
        assert [(h.session_id, h.seq, h.archived) for h in store.search("u1")] == [("w", 1, True)]
        assert [(h.session_id, h.seq) for h in store.search("rsum", session_id="r")] == [("r~1", 1)]
        [record] = store.compactions("w")
        detail = store.compaction_detail(record.id)
        # a record from before the ranges were kept: what it archived, nothing more
        assert not detail.complete and (detail.summary, detail.carried) == ((), ())
        assert [m.seq for m in detail.replaced] == [1, 2]
        [new] = store.append("w", Message("user", "u3"))
        lease = store.acquire_lease("w", "h", 30)
        record = store.commit_compaction(lease, watermark=new.seq, compacted=[Message("user", "s2")], mode="in_place")
        detail = store.compaction_detail(record.id)
        assert detail.complete and [m.seq for m in detail.replaced] == [4, 5, 6]
    finally:
        store.close()
