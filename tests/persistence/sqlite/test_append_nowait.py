"""`SqliteStore.append_nowait`: an append queued for the group-commit writer without a
waiting thread, completed by the writer after its COMMIT (the event loop's path)."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

import pytest

from persistence.sqlite import SqliteStore
from protocol import InvalidMessageError, Message
from tests.persistence.contract.db import wait_for

pytestmark = pytest.mark.timeout(30)


class Completions:
    """Collects ``on_done`` calls; every completion returns the same wake-up."""

    def __init__(self, expected: int) -> None:
        self.outcomes: list[tuple[Any, BaseException | None, str]] = []
        self.wakes = 0
        self.woken_after: list[int] = []  # how many completions each wake-up came after
        self.all_in = threading.Event()
        self._expected = expected

    def on_done(self, built: Any, error: BaseException | None) -> Any:
        self.outcomes.append((built, error, threading.current_thread().name))
        return self.wake

    def wake(self) -> None:
        self.wakes += 1
        self.woken_after.append(len(self.outcomes))
        if len(self.outcomes) >= self._expected:
            self.all_in.set()


@pytest.fixture
def store(tmp_path):
    opened = SqliteStore(str(tmp_path / "state.db"))
    yield opened
    opened.close()


def test_a_batch_of_submitted_appends_is_completed_by_the_writer_and_woken_once(store, tmp_path):
    for k in range(8):
        store.create_session(f"s{k}")
    done = Completions(expected=80)
    blocker = sqlite3.connect(str(tmp_path / "state.db"), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the writer waits: every submission joins one batch
    try:
        for i in range(10):
            for k in range(8):
                assert store.append_nowait(f"s{k}", [Message("user", f"{k}-{i}")], done.on_done)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert done.all_in.wait(10)
    assert done.wakes < 80 and done.woken_after[-1] == 80  # woken per batch, after its completions
    assert all(error is None for _, error, _ in done.outcomes)
    assert {thread for _, _, thread in done.outcomes} == {f"sqlite-writer:{store.path}"}
    stored = [built() for built, _, _ in done.outcomes]
    for k in range(8):
        assert [m.content for m in store.transcript(f"s{k}")] == [f"{k}-{i}" for i in range(10)]
    first = [m for batch in stored for m in batch if m.session_id == "s0"]
    assert [m.seq for m in first] == list(range(1, 11)) and first[0].content == "0-0"


def test_bad_messages_are_refused_before_anything_is_queued(tmp_path):
    small = SqliteStore(str(tmp_path / "small.db"), max_content_bytes=16)
    try:
        small.create_session("s")
        with pytest.raises(InvalidMessageError):
            small.append_nowait("s", [Message("user", "x" * 17)], lambda *_: None)
        assert small.write_stats().queued == 0 and small.transcript("s") == []
    finally:
        small.close()


def test_without_group_commit_nothing_is_submitted(tmp_path):
    plain = SqliteStore(str(tmp_path / "plain.db"), group_commit=False)
    try:
        plain.create_session("s")
        assert plain.append_nowait("s", [Message("user", "x")], lambda *_: None) is False
        assert plain.transcript("s") == []
    finally:
        plain.close()


class Answered:
    """One submitted append's completion: when it came, and what the writer was doing."""

    def __init__(self, store: SqliteStore) -> None:
        self.event = threading.Event()
        self.in_flight_then: int | None = None
        self.error: BaseException | None = None
        self._store = store

    def on_done(self, built: Any, error: BaseException | None) -> None:
        self.in_flight_then = self._store.write_stats().in_flight
        self.error = error
        self.event.set()


def _first_committed_with_another_queued(store: SqliteStore, path: str) -> tuple[Answered, Answered]:
    """Submit ``a`` while another connection holds the write lock (the writer takes
    it alone and waits), then ``b`` (queued behind it); then let ``a`` commit."""
    first, second = Answered(store), Answered(store)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        assert store.append_nowait("a", [Message("user", "a")], first.on_done)
        wait_for(lambda: store.write_stats().in_flight == 1)
        assert store.append_nowait("b", [Message("user", "b")], second.on_done)
        wait_for(lambda: store.write_stats().queued == 1)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    return first, second


def test_a_committed_submission_is_answered_while_the_next_batch_waits_on_the_disk(store, tmp_path):
    """With more queued, a committed batch's submitted appends are answered once the
    next batch is written and about to COMMIT (an event loop runs its tasks while the
    writer waits on the disk), not while the writer still builds that batch."""
    for sid in ("a", "b"):
        store.create_session(sid)
    first, second = _first_committed_with_another_queued(store, str(tmp_path / "state.db"))
    assert first.event.wait(10) and second.event.wait(10)
    assert first.error is None and second.error is None
    assert first.in_flight_then == 1  # answered during b's batch, not before it
    assert second.in_flight_then == 0  # nothing queued after b: answered at once
    assert [m.content for m in store.transcript("a")] == ["a"]
    assert [m.content for m in store.transcript("b")] == ["b"]


def test_a_committed_submission_never_waits_on_the_next_batch_finding_the_store_busy(
    store, tmp_path, monkeypatch, fault_hook
):
    """The fault: another connection takes the write lock right after the first COMMIT,
    so the next batch retries. The committed append is answered at once all the same:
    it never waits for another process's transaction."""

    path = str(tmp_path / "state.db")
    for sid in ("a", "b"):
        store.create_session(sid)
    foreign = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    took_lock = threading.Event()

    def lock_after_first_commit(point: str, operations: Any) -> None:
        if point == "after_commit" and not took_lock.is_set():
            foreign.execute("BEGIN IMMEDIATE")
            took_lock.set()

    fault_hook(lock_after_first_commit)
    try:
        first, second = _first_committed_with_another_queued(store, path)
        assert first.event.wait(10) and first.error is None
        assert took_lock.is_set() and not second.event.is_set()  # b still waits on the lock
    finally:
        if foreign.in_transaction:
            foreign.execute("ROLLBACK")
        foreign.close()
    assert second.event.wait(10) and second.error is None
    assert [m.content for m in store.transcript("b")] == ["b"]


OWED = [f"s{k}" for k in range(32)]


def _sessions_on_remembered_counters(store: SqliteStore) -> None:
    for sid in ("pace", *OWED):
        store.create_session(sid)
        store.append(sid, Message("user", "first"))  # its counter remembered: one statement


def _owed_batch_after_pace(store: SqliteStore, path: str, on_released: Any = None) -> tuple[Completions, int]:
    """A waiting caller's append ("pace") holds the writer on another connection's write
    lock while a submitted append per `OWED` session queues behind it, so that those
    are every answer the writer owes and one batch; then the lock goes (``on_released``
    called just before). Returns their completions and the transactions the writer had
    committed before."""
    done = Completions(expected=len(OWED))
    pace = threading.Thread(target=store.append, args=("pace", Message("user", "pace")))
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        pace.start()  # the writer takes it alone and waits on the lock
        wait_for(lambda: store.write_stats().in_flight == 1)
        for sid in OWED:
            assert store.append_nowait(sid, [Message("user", f"{sid}-2")], done.on_done)
        wait_for(lambda: store.write_stats().queued == len(OWED))
        before = store.write_stats().transactions
        if on_released is not None:
            on_released()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    pace.join(10)
    assert done.all_in.wait(10)
    assert all(error is None for _, error, _ in done.outcomes)
    assert sorted(m.session_id for built, _, _ in done.outcomes for m in built()) == sorted(OWED)
    return done, before


def test_a_batch_of_every_answer_owed_is_written_in_two_halves(store, tmp_path):
    """32 submitted appends that are every answer the writer owes (nothing held from the
    batch before, a commit far shorter than the wait for them) are written in two
    commits, so their consumer runs the first half's answers while the second half is
    written; each lands once, numbered in order, and is answered."""
    _sessions_on_remembered_counters(store)
    _, before = _owed_batch_after_pace(store, str(tmp_path / "state.db"))
    assert store.write_stats().transactions - before == 3  # pace's, then the 32's in two halves
    for sid in OWED:
        assert [(m.seq, m.content) for m in store.transcript(sid)] == [(1, "first"), (2, f"{sid}-2")]


def test_the_batch_of_every_answer_owed_is_written_whole_after_a_slow_commit(store, tmp_path, monkeypatch, fault_hook):
    """The split costs a second commit: after a commit that waited longer than half the
    time since the last answers went out (a fault stalls it at its commit point, as a
    slow disk would), the same 32 owed answers are written in one commit."""

    _sessions_on_remembered_counters(store)
    answered = Completions(expected=1)
    sent = time.monotonic()  # no later than the writer's "answers went out"
    assert store.append_nowait("pace", [Message("user", "answered")], answered.on_done)
    assert answered.all_in.wait(10)
    stall, stalled = threading.Event(), threading.Event()

    def slow_commit(point: str, operations: Any) -> None:
        if point == "before_commit" and stall.is_set():
            stall.clear()
            stalled.set()
            # The injected fault: this commit is slow, by more than everything since the
            # answers went out (however slow this machine was meanwhile), so its wait is
            # over half the time since then when the next batch is planned.
            time.sleep(2 * (time.monotonic() - sent) + 0.3)

    fault_hook(slow_commit)

    def stall_pace() -> None:
        # pace's next try is the slow one: the lock goes only once that try has begun,
        # never in the middle of a try that began before the fault was armed
        stall.set()
        assert stalled.wait(10)

    _, before = _owed_batch_after_pace(store, str(tmp_path / "state.db"), on_released=stall_pace)
    assert not stall.is_set()  # the fault happened
    assert store.write_stats().transactions - before == 2  # pace's, then the 32 whole
    assert [m.content for m in store.transcript("s5")] == ["first", "s5-2"]
