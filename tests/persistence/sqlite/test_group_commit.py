"""SQLite group commit: many requests, one transaction; one failure fails alone."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import pytest

from persistence.sqlite import SqliteStore
from persistence.sqlite._driver import connect
from persistence.sqlite._writer import GroupCommitWriter
from protocol import (
    Message,
    SessionEndedError,
    SessionExistsError,
    StoredMessage,
    TranscriptError,
    transcripts_equal,
)
from tests.persistence.contract.db import snapshot, wait_for

SUMMARY = Message("user", "[CONTEXT COMPACTION] s")


def _hold_write_lock(path: str) -> sqlite3.Connection:
    """Another connection takes the write lock, so the writer's batch waits behind it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def _run_in_threads(calls: list[Callable[[], Any]]) -> tuple[list[threading.Thread], dict[int, Any]]:
    results: dict[int, Any] = {}

    def run(i: int, call: Callable[[], Any]) -> None:
        try:
            results[i] = call()
        except BaseException as exc:  # collected for assertions
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    return threads, results


@pytest.mark.timeout(60)
def test_failing_requests_do_not_poison_their_batch(sqlite_path):
    store = SqliteStore(sqlite_path)
    try:
        for sid in ("blocker", "g1", "g2", "g3", "p", "taken"):
            store.create_session(sid)
        store.create_session("ended")
        store.end_session("ended", "user_exit")
        store.append("p", [Message("user", "q"), Message("assistant", "a")])
        lease = store.acquire_lease("p", "A", 60)
        base = store.write_stats()

        lock = _hold_write_lock(sqlite_path)
        try:
            first, first_result = _run_in_threads([lambda: store.append("blocker", Message("user", "b"))])
            wait_for(lambda: store.write_stats().in_flight == 1)
            batch_calls = [
                lambda: store.append("g1", [Message("user", "one"), Message("assistant", "1")]),
                lambda: store.append("ended", Message("user", "refused")),
                lambda: store.append("g2", Message("user", "two")),
                # fails late, after its fence/marks/epoch writes: must roll back alone
                lambda: store.commit_compaction(
                    lease, watermark=2, compacted=[SUMMARY], mode="rotate", child_session_id="taken"
                ),
                lambda: store.create_session("g1"),
                lambda: store.append("g3", Message("user", "three")),
            ]
            threads, results = _run_in_threads(batch_calls)
            wait_for(lambda: store.write_stats().queued == len(batch_calls))
        finally:
            lock.rollback()
            lock.close()
        for t in [*first, *threads]:
            t.join(timeout=30)

        stats = store.write_stats()
        assert stats.transactions - base.transactions == 2  # the blocker's, then one for all six
        assert stats.requests - base.requests == 1 + len(batch_calls)
        assert isinstance(first_result[0][0], StoredMessage)
        assert isinstance(results[1], SessionEndedError)
        assert isinstance(results[3], SessionExistsError)
        assert isinstance(results[4], SessionExistsError)
        assert transcripts_equal(store.transcript("g1"), [Message("user", "one"), Message("assistant", "1")])
        assert transcripts_equal(store.transcript("g2"), [Message("user", "two")])
        assert transcripts_equal(store.transcript("g3"), [Message("user", "three")])
        assert store.transcript("ended") == []
        # the failed compaction left no trace: marks, epoch, parent end all rolled back
        assert [m.state for m in store.transcript("p")] == ["live", "live"]
        assert store.get_session("p").epoch == 0 and store.get_session("p").live
        assert store.compactions("p") == []
        assert store.children("p") == []
    finally:
        store.close()


def test_group_commit_off_uses_one_transaction_per_append(sqlite_path):
    store = SqliteStore(sqlite_path, group_commit=False)
    try:
        store.create_session("s")
        base = store.write_stats()
        threads, results = _run_in_threads([lambda i=i: store.append("s", Message("user", str(i))) for i in range(8)])
        for t in threads:
            t.join(timeout=30)
        assert all(isinstance(r, list) for r in results.values())
        stats = store.write_stats()
        assert stats.transactions - base.transactions == 8 == stats.requests - base.requests
        assert [m.seq for m in store.transcript("s")] == list(range(1, 9))
    finally:
        store.close()


def test_close_finishes_queued_writes_and_stops_the_writer(sqlite_path):
    store = SqliteStore(sqlite_path)
    store.create_session("s")
    lock = _hold_write_lock(sqlite_path)
    threads, results = _run_in_threads([lambda: store.append("s", Message("user", "queued"))])
    wait_for(lambda: store.write_stats().in_flight == 1)
    closer = threading.Thread(target=store.close)
    closer.start()
    lock.rollback()
    lock.close()
    closer.join(timeout=30)
    threads[0].join(timeout=30)
    assert not closer.is_alive()
    assert isinstance(results[0], list) and results[0][0].seq == 1
    reopened = SqliteStore(sqlite_path)
    try:
        assert [m.content for m in reopened.transcript("s")] == ["queued"]
    finally:
        reopened.close()
    # the leak fixture checks the writer thread is gone


@pytest.mark.timeout(60)
def test_batched_appends_return_exactly_the_stored_rows(sqlite_path):
    """Appends that shared transactions return the ids/seqs the database holds."""
    store = SqliteStore(sqlite_path)
    try:
        sessions = [f"s{i}" for i in range(4)]
        for sid in sessions:
            store.create_session(sid)
        base = store.write_stats()
        calls = [
            lambda n=n: [
                store.append(sessions[n % 4], [Message("user", f"{n}-{i}-{k}") for k in range(1 + (n + i) % 3)])
                for i in range(10)
            ]
            for n in range(16)
        ]
        threads, results = _run_in_threads(calls)
        for t in threads:
            t.join(timeout=30)
        returned = [m for per_thread in results.values() for call in per_thread for m in call]
        assert len(returned) == sum(1 + (n + i) % 3 for n in range(16) for i in range(10))
        stored = {m.id: m for sid in sessions for m in store.transcript(sid)}
        assert sorted(stored) == sorted(m.id for m in returned)
        for m in returned:
            assert stored[m.id] == m  # same id, seq, session, time and content
        stats = store.write_stats()
        assert stats.transactions - base.transactions < stats.requests - base.requests  # batching happened
    finally:
        store.close()


def test_batched_requests_see_each_others_writes_in_order(sqlite_path):
    """Two appends to one session in the same batch get consecutive seqs in queue order."""
    store = SqliteStore(sqlite_path)
    try:
        store.create_session("s")
        lock = _hold_write_lock(sqlite_path)
        try:
            first, _ = _run_in_threads([lambda: store.append("s", Message("user", "0"))])
            wait_for(lambda: store.write_stats().in_flight == 1)
            threads = []
            for i in range(1, 6):  # enqueue one at a time to fix the order
                t, _ = _run_in_threads([lambda i=i: store.append("s", Message("user", str(i)))])
                threads += t
                wait_for(lambda i=i: store.write_stats().queued == i)
        finally:
            lock.rollback()
            lock.close()
        for t in [*first, *threads]:
            t.join(timeout=30)
        assert [(m.seq, m.content) for m in store.transcript("s")] == [(i + 1, str(i)) for i in range(6)]
        assert store.write_stats().transactions == 3  # create, the blocker, then the five together
        assert snapshot("sqlite", sqlite_path)["messages"]  # rows really in the file
    finally:
        store.close()


@pytest.mark.timeout(60)
def test_driver_error_in_a_batch_fails_only_its_request(sqlite_path):
    """A database-level failure (a trigger injected as a fault) inside a bulk run is
    replayed request by request: only the offending append fails, as our error."""
    store = SqliteStore(sqlite_path)
    try:
        for sid in ("a", "b", "c"):
            store.create_session(sid)
        inject = sqlite3.connect(sqlite_path, isolation_level=None)
        inject.execute(
            "CREATE TRIGGER inject_fault BEFORE INSERT ON messages WHEN NEW.content LIKE '%boom%'"
            " BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
        )
        inject.close()
        with pytest.raises(TranscriptError) as alone:
            store.append("a", [Message("user", "fine"), Message("user", "boom")])
        assert isinstance(alone.value.__cause__, sqlite3.Error)
        assert store.transcript("a") == []

        lock = _hold_write_lock(sqlite_path)
        try:
            first, _ = _run_in_threads([lambda: store.append("c", Message("user", "blocker"))])
            wait_for(lambda: store.write_stats().in_flight == 1)
            calls = [
                lambda: store.append("a", Message("user", "one")),
                lambda: store.append("b", [Message("user", "two"), Message("assistant", "boom")]),
                lambda: store.append("c", Message("user", "three")),
            ]
            threads, results = _run_in_threads(calls)
            wait_for(lambda: store.write_stats().queued == len(calls))
        finally:
            lock.rollback()
            lock.close()
        for t in [*first, *threads]:
            t.join(timeout=30)
        assert isinstance(results[1], TranscriptError) and isinstance(results[1].__cause__, sqlite3.Error)
        assert [m.content for m in store.transcript("a")] == ["one"]
        assert store.transcript("b") == []
        assert [m.content for m in store.transcript("c")] == ["blocker", "three"]
        assert [m.seq for m in store.append("b", Message("user", "after"))] == [1]  # no seq was burnt
    finally:
        store.close()


@pytest.mark.timeout(60)
def test_every_append_is_committed_when_it_returns(sqlite_path):
    """Durable on return, under the chained release: as soon as an append returns,
    another connection sees its rows (uncommitted rows are invisible to it)."""
    store = SqliteStore(sqlite_path)
    try:
        sessions = [f"s{i}" for i in range(16)]
        for sid in sessions:
            store.create_session(sid)
        start = threading.Barrier(len(sessions))
        missing: list[tuple[str, int]] = []

        def writer(sid: str) -> int:
            reader = sqlite3.connect(sqlite_path)
            try:
                start.wait(timeout=10)
                for i in range(40):
                    batch = [Message("user", f"{sid}-{i}-{k}") for k in range(1 + i % 2)]
                    for m in store.append(sid, batch):
                        row = reader.execute(
                            "SELECT content FROM messages WHERE id = ? AND session_id = ? AND seq = ?",
                            (m.id, sid, m.seq),
                        ).fetchone()
                        if row is None:
                            missing.append((sid, m.seq))
                return 40
            finally:
                reader.close()

        threads, results = _run_in_threads([lambda sid=sid: writer(sid) for sid in sessions])
        for t in threads:
            t.join(timeout=50)
        assert all(r == 40 for r in results.values()), results
        assert missing == []
        stats = store.write_stats()
        assert stats.transactions < stats.requests  # appends did share transactions
        for sid in sessions:
            seqs = [m.seq for m in store.transcript(sid)]
            assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) == sum(1 + i % 2 for i in range(40))
    finally:
        store.close()


@pytest.mark.timeout(60)
def test_committed_callers_do_not_wait_for_a_slow_next_batch(sqlite_path):
    """Callers of a committed batch are released before the writer goes on with a
    next batch that is not a plain run of appends (here: one that blocks)."""
    conn = connect(sqlite_path, synchronous="FULL")
    conn.execute("CREATE TABLE t (v TEXT NOT NULL)")
    writer = GroupCommitWriter(conn, patience_s=5.0, max_batch=64, name="test-writer")
    gates = {name: threading.Event() for name in ("first", "a", "b")}

    def insert_after(gate: str, value: str) -> Callable[[sqlite3.Connection], str]:
        def fn(c: sqlite3.Connection) -> str:
            assert gates[gate].wait(timeout=20), f"gate {gate} never opened"
            c.execute("INSERT INTO t (v) VALUES (?)", (value,))
            return value

        return fn

    try:
        first, first_result = _run_in_threads([lambda: writer.submit(insert_after("first", "0"))])
        wait_for(lambda: writer.stats().in_flight == 1)
        a, a_result = _run_in_threads([lambda: writer.submit(insert_after("a", "a"))])
        wait_for(lambda: writer.stats().queued == 1)
        gates["first"].set()  # "0" commits; "a" runs next, and blocks
        first[0].join(timeout=10)
        assert first_result == {0: "0"}
        b, b_result = _run_in_threads([lambda: writer.submit(insert_after("b", "b"))])
        wait_for(lambda: writer.stats().queued == 1)
        gates["a"].set()  # "a" commits while "b" waits: its caller must not wait for "b"
        a[0].join(timeout=10)
        assert a_result == {0: "a"}
        assert b[0].is_alive()  # "b" still running: its caller waits, "a"'s did not
        wait_for(lambda: writer.stats().in_flight == 1)  # (the writer may be between batches)
        outside = sqlite3.connect(sqlite_path)
        try:
            assert sorted(v for (v,) in outside.execute("SELECT v FROM t")) == ["0", "a"]
        finally:
            outside.close()
        gates["b"].set()
        b[0].join(timeout=10)
        assert b_result == {0: "b"}
    finally:
        for gate in gates.values():
            gate.set()
        writer.close()
        conn.close()


def test_group_commit_off_runs_appends_in_the_callers_threads(sqlite_path):
    """Without group commit there is no writer thread: each caller commits its own append."""
    before = set(threading.enumerate())
    store = SqliteStore(sqlite_path, group_commit=False)
    try:
        assert set(threading.enumerate()) == before
        store.create_session("s")
        stored = store.append("s", Message("user", "mine"))
        outside = sqlite3.connect(sqlite_path)
        try:
            row = outside.execute("SELECT content FROM messages WHERE id = ?", (stored[0].id,)).fetchone()
            assert row == ('"mine"',)
        finally:
            outside.close()
    finally:
        store.close()
    with pytest.raises(TranscriptError):
        store.append("s", Message("user", "after close"))


@pytest.mark.timeout(60)
def test_callers_of_a_batch_all_return_when_one_never_passes_the_release_on(sqlite_path, monkeypatch):
    """A committed batch's callers release one another in a few interleaved chains
    (`persistence._batching.RELEASE_CHAINS`). A caller interrupted while it waited
    never passes the release on: every other caller of its batch still returns with
    its own rows, those in other chains and those after it in its own (the writer
    sweeps a stalled chain)."""
    from persistence.sqlite import _writer as writer_module

    class Interrupted(BaseException):
        """What an interrupt (KeyboardInterrupt, an async exception) is to the waiter."""

    original = writer_module._Request.wait

    def interrupted(self):  # the fault: wakes, then dies before releasing the next caller
        if self.job is not None and self.job.session_id == "stalls":
            self.done.wait()
            raise Interrupted()
        return original(self)

    monkeypatch.setattr(writer_module._Request, "wait", interrupted)
    store = SqliteStore(sqlite_path)
    try:
        queued = ["a", "stalls", "c", "d", "e", "f", "g"]  # one batch, more callers than chains
        for sid in ["first"] + queued:
            store.create_session(sid)
        lock = _hold_write_lock(sqlite_path)
        calls = [lambda: store.append("first", Message("user", "first"))]
        threads, results = _run_in_threads(calls)
        wait_for(lambda: store.write_stats().in_flight == 1)  # "first" waits on the lock alone
        for n, sid in enumerate(queued):  # queued in this order: the chains' order
            more, more_results = _run_in_threads([lambda sid=sid: store.append(sid, Message("user", sid))])
            threads += more
            wait_for(lambda n=n: store.write_stats().queued == n + 1)
            results[sid] = more_results
        lock.rollback()
        lock.close()
        for t in threads:
            t.join(timeout=20)
        assert not any(t.is_alive() for t in threads)
        assert results[0][0].content == "first"
        assert isinstance(results["stalls"][0], Interrupted)
        for sid in queued:
            if sid != "stalls":
                assert [m.content for m in results[sid][0]] == [sid]
        outside = sqlite3.connect(sqlite_path)
        try:
            rows = [r[0] for r in outside.execute("SELECT session_id FROM messages ORDER BY id")]
        finally:
            outside.close()
        assert rows == ["first"] + queued  # the interrupted caller's row was committed too
    finally:
        store.close()


@pytest.mark.timeout(60)
def test_a_committed_caller_returns_while_the_writer_builds_the_next_batch(sqlite_path, monkeypatch, fault_hook):
    """A committed batch's waiting callers are released right after its COMMIT, so
    they run while the writer builds the next batch. Seen from the writer reaching
    the next batch's BEGIN: has the first caller returned by then?"""

    committed, first_returned = threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def at(point: str, operations: Any) -> None:
        if point == "after_commit":
            committed.set()
        elif point == "before_begin" and committed.is_set() and "next batch" not in seen:
            seen["next batch"] = first_returned.wait(10)

    store = SqliteStore(sqlite_path)
    try:
        for sid in ("a", "b"):
            store.create_session(sid)
        fault_hook(at)
        lock = _hold_write_lock(sqlite_path)

        def first() -> list[StoredMessage]:
            stored = store.append("a", Message("user", "a"))
            first_returned.set()
            return stored

        threads, results = _run_in_threads([first])
        wait_for(lambda: store.write_stats().in_flight == 1)  # "a" waits on the lock alone
        more, more_results = _run_in_threads([lambda: store.append("b", Message("user", "b"))])
        wait_for(lambda: store.write_stats().queued == 1)  # "b" waits for the next batch
        lock.rollback()
        lock.close()
        for t in threads + more:
            t.join(timeout=20)
        assert not any(t.is_alive() for t in threads + more)
        assert seen == {"next batch": True}
        assert [m.content for m in results[0]] == ["a"]
        assert [m.content for m in more_results[0]] == ["b"]
    finally:
        store.close()
