"""SQLite group commit with remembered seq counters: a batch of appends skips
reading its sessions' counters when the writer remembers them, and the database
refuses a remembered counter that is stale (another connection appended, the id
was erased and started again, the batch that noted it rolled back)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import pytest

from persistence.sqlite import SqliteStore
from protocol import Message, SessionNotFoundError
from tests.persistence.contract.db import wait_for, writes_held

pytestmark = pytest.mark.timeout(60)


def _in_one_batch(store: SqliteStore, path: str, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` (appends) in one batch of the writer: another connection holds
    the write lock while a first append takes the writer alone and the calls queue
    behind it. Returns each call's result, or the exception it raised."""
    results: list[Any] = [None] * len(calls)

    def run(i: int, call: Callable[[], Any]) -> None:
        try:
            results[i] = call()
        except BaseException as exc:  # the test asserts on it
            results[i] = exc

    threads = []
    with writes_held("sqlite", path):
        threads.append(threading.Thread(target=store.append, args=("pace", Message("user", "pace"))))
        threads[0].start()
        wait_for(lambda: store.write_stats().in_flight == 1)  # "pace" waits on the lock alone
        for i, call in enumerate(calls):
            threads.append(threading.Thread(target=run, args=(i, call)))
            threads[-1].start()
        wait_for(lambda: store.write_stats().queued == len(calls))
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads)
    return results


def _seqs_and_contents(path: str, session_id: str) -> list[tuple[int, str]]:
    conn = sqlite3.connect(path)
    try:
        return [
            (seq, content)
            for seq, content in conn.execute(
                "SELECT seq, json_extract(content, '$') FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
            )
        ]
    finally:
        conn.close()


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "state.db")


def test_a_batch_after_another_connection_appended_numbers_from_the_database(path):
    """The writer remembers s1 at seq 3; another store (another connection, as
    another process) appends to it; the next batch must not trust the counter."""
    store, other = SqliteStore(path), None
    try:
        for sid in ("pace", "s1", "s2"):
            store.create_session(sid)
        for n in (1, 2):  # two batches: the second one runs on remembered counters
            _in_one_batch(
                store, path, [lambda n=n, s=s: store.append(s, Message("user", f"{s}-{n}")) for s in ("s1", "s2")]
            )
        other = SqliteStore(path)
        other.append("s1", Message("user", "from another connection"))
        results = _in_one_batch(
            store, path, [lambda s=s: store.append(s, Message("user", f"{s}-3")) for s in ("s1", "s2")]
        )
        assert [r[0].seq for r in results] == [4, 3]
        assert _seqs_and_contents(path, "s1") == [(1, "s1-1"), (2, "s1-2"), (3, "from another connection"), (4, "s1-3")]
        assert _seqs_and_contents(path, "s2") == [(1, "s2-1"), (2, "s2-2"), (3, "s2-3")]
    finally:
        store.close()
        if other is not None:
            other.close()


@pytest.mark.parametrize("rows_each", [1, 40], ids=["one-statement", "in-a-transaction"])
def test_a_batch_retried_after_a_rollback_does_not_trust_the_counters_it_noted(
    path, monkeypatch, rows_each, fault_hook
):
    """The first try of a batch on remembered counters fails at its COMMIT (the store
    was busy): written in a transaction (its rows fill more than one INSERT), it had
    moved and noted the counters and rolls back; written as one statement, it never
    started. Either way the retry finds the counters where they were, so its rows
    follow on without a gap."""
    store = SqliteStore(path)
    try:
        for sid in ("pace", "s1", "s2"):
            store.create_session(sid)

        def appends(n: int) -> list[Callable[[], Any]]:
            return [
                lambda s=s: store.append(s, [Message("user", f"{s}-{n}-{k}") for k in range(rows_each)])
                for s in ("s1", "s2")
            ]

        _in_one_batch(store, path, appends(1))
        failed: list[str] = []

        def busy_once(point: str, operations: Any) -> None:
            if point == "before_commit" and len(operations) == 2 and not failed:
                failed.append(point)
                raise sqlite3.OperationalError("database is locked")

        fault_hook(busy_once)
        results = _in_one_batch(store, path, appends(2))
        assert failed  # the fault happened, and the retry committed
        assert [r[0].seq for r in results] == [rows_each + 1, rows_each + 1]
        for sid in ("s1", "s2"):
            assert _seqs_and_contents(path, sid) == [
                (1 + n * rows_each + k, f"{sid}-{n + 1}-{k}") for n in range(2) for k in range(rows_each)
            ]
    finally:
        store.close()


def test_a_remembered_counter_of_an_erased_id_is_refused_for_its_incarnation(path):
    """The writer remembers s1 of one conversation at seq 2. The id is erased and
    started again by another connection, whose one append brings the new
    conversation's counter to the same seq 2: an append meant for the old
    conversation must be refused, not land in the new one."""
    store, other = SqliteStore(path), SqliteStore(path)
    try:
        for sid in ("pace", "s1", "s2"):
            store.create_session(sid)
        meant = {sid: store.get_session(sid).incarnation for sid in ("s1", "s2")}

        def append(sid: str, text: str) -> Callable[[], Any]:
            return lambda: store.append(sid, Message("user", text), incarnation=meant[sid])

        _in_one_batch(store, path, [append("s1", "old-1"), append("s2", "s2-1")])
        other.delete_session("s1")
        other.create_session("s1")
        other.append("s1", Message("user", "new conversation"))  # its counter: 2, as remembered
        results = _in_one_batch(store, path, [append("s1", "old-2"), append("s2", "s2-2")])
        assert isinstance(results[0], SessionNotFoundError)
        assert results[1][0].seq == 2
        assert _seqs_and_contents(path, "s1") == [(1, "new conversation")]
        assert _seqs_and_contents(path, "s2") == [(1, "s2-1"), (2, "s2-2")]
    finally:
        store.close()
        other.close()


def _next_seq(path: str, session_id: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT next_seq FROM sessions WHERE id = ?", (session_id,)).fetchone()[0]
    finally:
        conn.close()


def test_a_row_inserted_at_the_counter_moves_it_and_one_below_leaves_it(path):
    """The counter follows the rows in the database itself (schema 5's trigger): a row
    at or above next_seq moves it past the row; a row below it (a write that reserved
    its seqs first) leaves it alone."""
    SqliteStore(path).close()
    store = SqliteStore(path)
    try:
        store.create_session("s1")
    finally:
        store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        insert = (
            "INSERT INTO messages (session_id, seq, role, content, created_at) VALUES ('s1', ?, 'user', '\"x\"', 0)"
        )
        conn.execute(insert, (1,))
        assert _next_seq(path, "s1") == 2
        conn.execute(insert, (5,))  # past the counter (only a hand-edit does this)
        assert _next_seq(path, "s1") == 6
        conn.execute("UPDATE sessions SET next_seq = 9 WHERE id = 's1'")  # seqs 6-8 reserved
        conn.execute(insert, (6,))
        assert _next_seq(path, "s1") == 9
    finally:
        conn.close()


def test_a_remembered_batch_longer_than_one_insert_numbers_on_with_consecutive_ids(path):
    """A batch on remembered counters whose rows fill more than one INSERT (the first
    one checks the counters, the rest follow it): every row lands once, numbered on
    from the counters, with the ids each append was answered, and the counters end
    past the last rows."""
    store = SqliteStore(path)
    try:
        for sid in ("pace", "s1", "s2"):
            store.create_session(sid)

        def appends(n: int) -> list[Callable[[], Any]]:
            return [
                lambda s=s: store.append(s, [Message("user", f"{s}-{n}-{k}") for k in range(40)]) for s in ("s1", "s2")
            ]

        _in_one_batch(store, path, appends(1))
        results = _in_one_batch(store, path, appends(2))  # 80 rows on remembered counters
        for sid, stored in zip(("s1", "s2"), results):
            assert [m.seq for m in stored] == list(range(41, 81))
            rows = _seqs_and_contents(path, sid)
            assert rows == [(seq, f"{sid}-{1 + (seq - 1) // 40}-{(seq - 1) % 40}") for seq in range(1, 81)]
            assert [(m.id, m.seq) for m in stored] == [(m.id, m.seq) for m in store.transcript(sid)[40:]]
            assert _next_seq(path, sid) == 81
    finally:
        store.close()


def test_a_batch_on_remembered_counters_takes_the_write_lock_in_its_one_statement(path, monkeypatch, fault_hook):
    """A batch whose counters are read runs in a transaction: at its COMMIT point the
    writer holds the write lock. One on remembered counters is one statement, which
    takes the lock itself: at the same point (just before it) nobody holds it."""
    store = SqliteStore(path)
    try:
        for sid in ("pace", "s1", "s2"):
            store.create_session(sid)
        lock_free_at_commit: list[bool] = []

        def probe(point: str, operations: Any) -> None:
            if point == "before_commit" and operations == ["append", "append"]:
                other = sqlite3.connect(path, timeout=0, isolation_level=None)
                try:
                    other.execute("BEGIN IMMEDIATE")
                    other.execute("ROLLBACK")
                    lock_free_at_commit.append(True)
                except sqlite3.OperationalError:
                    lock_free_at_commit.append(False)
                finally:
                    other.close()

        fault_hook(probe)
        for n in (1, 2):
            results = _in_one_batch(
                store, path, [lambda n=n, s=s: store.append(s, Message("user", f"{s}-{n}")) for s in ("s1", "s2")]
            )
            assert [r[0].seq for r in results] == [n, n]
        assert lock_free_at_commit == [False, True]
    finally:
        store.close()
