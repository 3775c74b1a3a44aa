"""The submitted append path of ``append_async``: an event loop's append is queued
for the SQLite store's group commit without waiting and answered by the commit
(`SessionActor.submit_here`), holding the actor's exclusivity until then.

A submitted append is kept uncommitted by holding the SQLite write lock from
another connection (the writer retries within its patience); meanwhile the tests
race it against sync appends, a turn, compaction (both modes), retract, a
rotation by another process, eviction and erasure, and check the order the
database ends up with. The store is the real one; the subclass only tells when an
append was submitted and counts the blocking appends.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from actors import CompactionPolicy, SessionRegistry
from actors.testing import GatedCompressor
from persistence.sqlite import SqliteStore
from protocol import (
    SUMMARY_PREFIX,
    CompressionStatus,
    Message,
    SessionNotFoundError,
    StoreBusyError,
)

from .helpers import conversation, result_of, run_in_thread

pytestmark = pytest.mark.timeout(60)


class ObservedStore(SqliteStore):
    """The real store; ``submitted`` is set once an append was queued without waiting.
    ``calls`` counts the calls of the methods a later message would make (a blocking
    append, a retract, a lease, a compaction commit, an erasure), as they start: none
    may start while a submitted append is uncommitted. ``blocking_ids`` lists the
    sessions the blocking appends were made to."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.submitted = threading.Event()
        self.submissions = 0
        self.calls: Counter[str] = Counter()
        self.blocking_ids: list[str] = []

    @property
    def blocking(self) -> int:
        return self.calls["append"]

    def append_nowait(self, *args: Any, **kwargs: Any) -> bool:
        queued = super().append_nowait(*args, **kwargs)
        if queued:
            self.submissions += 1
            self.submitted.set()
        return queued

    def append(self, session_id: str, messages: Any, **options: Any) -> Any:
        self.calls["append"] += 1
        self.blocking_ids.append(session_id)
        return super().append(session_id, messages, **options)

    def retract(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["retract"] += 1
        return super().retract(*args, **kwargs)

    def acquire_lease(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["acquire_lease"] += 1
        return super().acquire_lease(*args, **kwargs)

    def commit_compaction(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["commit_compaction"] += 1
        return super().commit_compaction(*args, **kwargs)

    def delete_session(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["delete_session"] += 1
        return super().delete_session(*args, **kwargs)


class WriteLock:
    """Holds the database's write lock from another connection until `release`."""

    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, timeout=10)
        self._conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")
        self._conn.close()


@pytest.fixture
def db(tmp_path) -> str:
    return str(tmp_path / "state.db")


@pytest.fixture
def make(db: str) -> Iterator[Callable[..., tuple[SessionRegistry, ObservedStore]]]:
    """``make(compressor=None, patience_s=30, **policy)``: a registry on its own
    `ObservedStore` of the test file (a second call stands for a second process)."""
    made: list[tuple[SessionRegistry, ObservedStore]] = []

    def build(
        compressor: Any = None, *, patience_s: float = 30.0, **policy: Any
    ) -> tuple[SessionRegistry, ObservedStore]:
        store = ObservedStore(db, patience_s=patience_s)
        registry = SessionRegistry(store, compressor=compressor, policy=CompactionPolicy(**policy))
        made.append((registry, store))
        return registry, store

    yield build
    for registry, store in reversed(made):
        registry.close()
        store.close()


def contents(store: SqliteStore, session_id: str) -> list[str]:
    return [m.content for m in store.transcript(session_id)]


async def submitted_and_held(store: ObservedStore, append: Any) -> asyncio.Task[Any]:
    """Start ``append`` (a coroutine) and return its task once it is submitted."""
    store.submitted.clear()
    task = asyncio.ensure_future(append)
    assert await asyncio.to_thread(store.submitted.wait, 10)
    assert not task.done()
    return task


async def still_running(thread: threading.Thread) -> bool:
    """Give a racing thread a moment to (wrongly) finish; True if it still waits."""
    await asyncio.to_thread(thread.join, 0.3)
    return thread.is_alive()


def appending_tasks(handles: list[Any], tasks_per_session: int, per_task: int) -> list[list[Any]]:
    """``tasks_per_session`` tasks per handle on one event loop, each appending
    ``per_task`` messages ``"t-i"`` in order; fails if a loop callback took long."""

    async def main() -> list[list[Any]]:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        # a callback waiting on commits would show up here; the bound allows for a loaded
        # machine (the deterministic check is the heartbeat behind a held write lock)
        loop.slow_callback_duration = 1.0
        slow: list[str] = []

        class Slow(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if "Executing" in record.getMessage():
                    slow.append(record.getMessage())

        detector = Slow(logging.WARNING)
        logging.getLogger("asyncio").addHandler(detector)
        try:

            async def writer(handle: Any, t: int) -> list[Any]:
                return [await handle.append_async("user", f"{t}-{i}") for i in range(per_task)]

            return await asyncio.gather(*(writer(h, t) for h in handles for t in range(tasks_per_session)))
        finally:
            logging.getLogger("asyncio").removeHandler(detector)
            assert not slow, f"the event loop was blocked: {slow}"

    return asyncio.run(main())


def assert_each_task_in_order(store: SqliteStore, session_id: str, tasks: int, per_task: int) -> None:
    stored = contents(store, session_id)
    assert len(stored) == tasks * per_task
    for t in range(tasks):
        mine = [stored.index(f"{t}-{i}") for i in range(per_task)]
        assert mine == sorted(mine)


def test_one_task_per_session_appends_through_the_commit_only(make):
    """No thread per call: every append is submitted from the loop and answered by
    the commit; the blocking store append (an actor or caller thread) is never used."""
    registry, store = make()
    handles = [registry.session(f"s{k}") for k in range(16)]
    results = appending_tasks(handles, 1, 25)
    assert store.blocking == 0
    assert store.submissions == 16 * 25
    for k in range(16):
        assert_each_task_in_order(store, f"s{k}", 1, 25)
    assert all([m.seq for m in batch] == list(range(1, 26)) for batch in results)


def test_tasks_sharing_a_session_mix_both_paths_in_order(make):
    """While one task's append is submitted, another task's append on the same
    session goes through the mailbox (the loop never waits for the actor)."""
    registry, store = make()
    handles = [registry.session(f"s{k}") for k in range(4)]
    appending_tasks(handles, 4, 25)
    assert store.submissions > 0 and store.blocking > 0
    assert store.submissions + store.blocking == 4 * 4 * 25
    for k in range(4):
        assert_each_task_in_order(store, f"s{k}", 4, 25)


def test_the_loop_runs_while_a_submitted_append_waits_for_the_write_lock(make, db):
    registry, store = make()
    handle = registry.session("waiting")

    async def main() -> tuple[int, Any]:
        lock = WriteLock(db)
        try:
            task = await submitted_and_held(store, handle.append_async("user", "held"))
            ticks = 0
            for _ in range(10):  # the loop keeps running other work meanwhile
                await asyncio.sleep(0.01)
                ticks += 1
            assert not task.done()
        finally:
            lock.release()
        return ticks, await task

    ticks, stored = asyncio.run(main())
    assert ticks == 10 and stored.content == "held" and stored.seq == 1


def test_a_sync_append_racing_a_submitted_one_lands_after_it(make, db):
    registry, store = make()
    handle = registry.session("race")

    async def main() -> Any:
        lock = WriteLock(db)
        try:
            task = await submitted_and_held(store, handle.append_async("user", "submitted"))
            other, box = run_in_thread(lambda: registry.review("race").append("assistant", "sync"))
            assert await still_running(other)
            assert store.blocking == 0  # it waits behind the actor: not even queued yet
        finally:
            lock.release()
        first = await task
        return first, await asyncio.to_thread(result_of, other, box)

    first, second = asyncio.run(main())
    assert first.seq < second.seq
    assert contents(store, "race") == ["submitted", "sync"]


def test_a_retract_racing_a_submitted_append_takes_it_back(make, db):
    registry, store = make()
    handle = registry.session("retract")
    handle.append("user", "kept")

    async def main() -> Any:
        lock = WriteLock(db)
        try:
            task = await submitted_and_held(store, handle.append_async("assistant", "taken back"))
            retracting, box = run_in_thread(handle.retract)
            assert await still_running(retracting)
            assert store.calls["retract"] == 0
        finally:
            lock.release()
        await task
        return await asyncio.to_thread(result_of, retracting, box)

    popped = asyncio.run(main())
    assert popped.content == "taken back"
    assert contents(store, "retract") == ["kept"]


def test_another_handles_turn_waits_for_a_submitted_append(make, db):
    registry, store = make()
    main_handle = registry.session("turn")
    review = registry.review("turn")

    entered = threading.Event()

    def whole_turn() -> None:
        with review.turn():
            entered.set()
            review.append("user", "turn ask")
            review.append("assistant", "turn answer")

    async def main() -> None:
        lock = WriteLock(db)
        try:
            task = await submitted_and_held(store, main_handle.append_async("user", "before the turn"))
            turn, box = run_in_thread(whole_turn)
            assert await still_running(turn)
            assert not entered.is_set()  # the turn opens after the append, not around it
        finally:
            lock.release()
        await task
        await asyncio.to_thread(result_of, turn, box)

    asyncio.run(main())
    assert contents(store, "turn") == ["before the turn", "turn ask", "turn answer"]


def test_a_task_answered_through_the_mailbox_finds_the_actor_free(make):
    """The actor answers a message only once it has let the session go: the task's
    next append is submitted, every time, even when the answer wakes the loop before
    the actor thread has gone on (frequent GIL switches make that likely)."""
    registry, store = make()
    handle = registry.session("answered")

    async def main() -> None:
        for i in range(100):
            await handle.transcript_async()  # through the mailbox
            await handle.append_async("user", f"after a read {i}")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        asyncio.run(main())
    finally:
        sys.setswitchinterval(interval)
    assert store.submissions == 100


def test_a_submitted_append_in_a_turn_keeps_the_turn_out_of_a_snapshot(make):
    """The turn gate learns the submitted append's seqs (the actor's bookkeeping):
    a compaction during the turn snapshots only what came before it."""
    gated = GatedCompressor()
    gated.release()
    registry, store = make(gated)
    handle = registry.session("turn-snapshot")
    handle.append(conversation(6))

    async def main() -> Any:
        async with handle.turn():
            await handle.append_async("user", "turn ask")
            await handle.append_async("assistant", "turn answer")
            return await handle.compress_async()

    outcome = asyncio.run(main())
    assert outcome.status is CompressionStatus.COMPACTED
    assert store.submissions == 2
    assert [m.content for m in gated.inputs[0]] == [m.content for m in conversation(6)]
    assert contents(store, "turn-snapshot")[-2:] == ["turn ask", "turn answer"]


@pytest.mark.parametrize("mode", ["in_place", "rotate"])
def test_a_submitted_append_racing_a_compaction_lands_in_its_tail(make, db, mode):
    gated = GatedCompressor()
    registry, store = make(gated, mode=mode)
    handle = registry.session("compacting")
    handle.append(conversation(6))

    async def main() -> tuple[Any, Any, Any]:
        compressing = asyncio.ensure_future(handle.compress_async())
        assert await asyncio.to_thread(gated.wait_started, 10)
        # the compressor can start before the actor's Compress handler has returned: a
        # read through the mailbox comes after it (a sync one: its answer wakes no loop
        # while the handler still runs), so the actor is idle again
        await asyncio.to_thread(handle.transcript)
        lock = WriteLock(db)
        try:
            task = await submitted_and_held(store, handle.append_async("user", "during"))
            gated.release()  # the result reaches the actor, which waits for the append
            await asyncio.sleep(0.2)
            assert not compressing.done()
            assert store.calls["commit_compaction"] == 0
        finally:
            lock.release()
        during = await task
        outcome = await compressing
        after = await handle.append_async("assistant", "after")
        return during, outcome, after

    during, outcome, after = asyncio.run(main())
    assert outcome.status is (CompressionStatus.ROTATED if mode == "rotate" else CompressionStatus.COMPACTED)
    assert after.session_id == outcome.session_id == handle.session_id
    live = contents(store, outcome.session_id)
    summary = [i for i, c in enumerate(live) if c.startswith(SUMMARY_PREFIX)]
    assert len(summary) == 1 and live[summary[0] + 1 :] == ["during", "after"]
    assert during.content == "during"


def test_a_submitted_append_follows_a_rotation_by_another_process_first(make, db):
    """The other process rotated the session: the submitted append meets it ended,
    follows the successor (off the writer thread) and is still ahead of a sync
    append that arrived meanwhile."""
    registry, store = make()
    gated = GatedCompressor()
    gated.release()
    other, _ = make(gated, mode="rotate")
    handle = registry.session("rotated")
    handle.append(conversation(4))
    outcome = other.session("rotated").compress()
    assert outcome.status is CompressionStatus.ROTATED
    child = outcome.session_id

    async def main() -> tuple[Any, Any]:
        lock = WriteLock(db)
        try:
            task = await submitted_and_held(store, handle.append_async("user", "submitted"))
            racing, box = run_in_thread(lambda: handle.append("assistant", "sync"))
            assert await still_running(racing)
            assert store.blocking == before  # it waits behind the actor: not even queued yet
        finally:
            lock.release()
        first = await task
        return first, await asyncio.to_thread(result_of, racing, box)

    before = store.blocking
    first, second = asyncio.run(main())
    # the redirected append, then the sync one: which never met the ended parent
    assert store.blocking_ids[before:] == [child, child]
    assert first.session_id == second.session_id == child == handle.session_id
    assert first.seq < second.seq
    assert contents(store, child)[-2:] == ["submitted", "sync"]


def test_erasing_the_session_waits_for_a_submitted_append(make, db):
    registry, store = make()
    handle = registry.session("erased")
    handle.append("user", "one")

    async def main() -> tuple[Any, int]:
        lock = WriteLock(db)
        try:
            task = await submitted_and_held(store, handle.append_async("assistant", "two"))
            deleting, box = run_in_thread(lambda: registry.delete("erased"))
            assert await still_running(deleting)
            assert store.calls["delete_session"] == 0  # the actor stops after the append
        finally:
            lock.release()
        stored = await task  # acknowledged: it committed before the erasure
        erased = await asyncio.to_thread(result_of, deleting, box)
        with pytest.raises(SessionNotFoundError):
            await handle.append_async("user", "after the erasure")
        return stored, erased

    stored, erased = asyncio.run(main())
    assert stored.seq == 2 and erased == 2
    assert store.get_session("erased") is None


def test_submitted_appends_racing_eviction_lose_nothing(make):
    """Idle actors are evicted while tasks append in bursts: an append meets a live
    actor (submitted) or a stopped one (restarted through the mailbox)."""
    registry, store = make(idle_timeout_s=0.03)
    handles = {sid: registry.session(sid) for sid in ("left", "right")}
    per_task, tasks = 40, 2

    async def main() -> None:
        async def writer(sid: str, t: int) -> None:
            for i in range(per_task):
                await handles[sid].append_async("user", f"{t}-{i}")
                if i % 8 == 7:  # a pause: long enough for the janitor to evict the actor
                    await asyncio.sleep(0.1)

        await asyncio.gather(*(writer(sid, t) for sid in handles for t in range(tasks)))

    asyncio.run(main())
    assert registry.stats()["actors_stopped"] >= 2
    assert store.submissions > 0
    for sid in handles:
        assert_each_task_in_order(store, sid, tasks, per_task)


def test_a_compress_racing_a_submitted_append_snapshots_it(make, db):
    """A compress arriving while an append is submitted is handled after the commit:
    its snapshot (taken under the lease) includes the append."""
    gated = GatedCompressor()
    gated.release()
    registry, store = make(gated)
    handle = registry.session("snapshot")
    handle.append(conversation(4))

    async def main() -> Any:
        lock = WriteLock(db)
        try:
            await submitted_and_held(store, handle.append_async("user", "submitted"))
            compressing = asyncio.ensure_future(handle.compress_async())
            await asyncio.sleep(0.2)
            assert store.calls["acquire_lease"] == 0  # the compress waits behind the append
        finally:
            lock.release()
        return await compressing

    assert asyncio.run(main()).status is CompressionStatus.COMPACTED
    assert [m.content for m in gated.inputs[0]][-1] == "submitted"


def test_a_submitted_append_keeps_its_actor_resident(make, db):
    """An actor whose append is submitted is busy: a start that needs its room
    evicts it only after the commit."""
    registry, store = make(max_resident=1)
    handle = registry.session("resident")
    store.create_session("other")  # starting its actor only reads

    async def main() -> Any:
        lock = WriteLock(db)
        try:
            task = await submitted_and_held(store, handle.append_async("user", "submitted"))
            starting = asyncio.ensure_future(registry.session_async("other"))
            await asyncio.sleep(0.2)
            stopped = registry.stats()["actors_stopped"]
        finally:
            lock.release()
        await starting
        return stopped, await task

    stopped, stored = asyncio.run(main())
    assert stopped == 0 and stored.content == "submitted"
    assert contents(store, "resident") == ["submitted"]


def test_a_cancelled_task_leaves_its_submitted_append_applied_once(make, db):
    registry, store = make()
    handle = registry.session("cancelled")

    async def main() -> Any:
        lock = WriteLock(db)
        try:
            task = await submitted_and_held(store, handle.append_async("user", "orphan"))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            lock.release()
        return await handle.append_async("assistant", "next")

    after = asyncio.run(main())
    assert contents(store, "cancelled") == ["orphan", "next"]  # applied, exactly once
    assert after.seq == 2


def test_a_session_erased_by_another_process_reaches_the_awaiting_task(make):
    registry, store = make()
    _, other_store = make()
    handle = registry.session("gone")
    handle.append("user", "hello")
    other_store.delete_session("gone")  # not through this registry: it learns on append

    async def main() -> None:
        with pytest.raises(SessionNotFoundError):
            await handle.append_async("user", "late")

    asyncio.run(main())
    assert store.submissions == 1
    fresh = registry.session("gone")  # the actor retired: a new conversation starts
    assert fresh.append("user", "new").seq == 1


def test_a_submitted_append_never_writes_into_a_conversation_started_again_elsewhere(make):
    """The submitted append names the actor's incarnation like a blocking one: the
    new conversation under the same id refuses it, and the actor retires before
    the task hears of it."""
    registry, store = make()
    _, other_store = make()
    old = registry.session("again")
    old.append("user", "first conversation")
    other_store.delete_session("again")
    other_store.create_session("again")
    other_store.append("again", Message("user", "second conversation"))

    async def main() -> None:
        with pytest.raises(SessionNotFoundError):
            await old.append_async("user", "stale write")

    asyncio.run(main())
    assert store.submissions == 1
    assert registry.stats()["resident"] == 0  # retired
    assert contents(store, "again") == ["second conversation"]


def test_a_busy_database_reaches_the_awaiting_task_and_frees_the_actor(make, db):
    registry, store = make(patience_s=0.3)
    handle = registry.session("busy")

    async def main() -> Any:
        lock = WriteLock(db)
        try:
            with pytest.raises(StoreBusyError):
                await handle.append_async("user", "gave up")
        finally:
            lock.release()
        return await handle.append_async("user", "afterwards")  # the actor is free again

    stored = asyncio.run(main())
    assert stored.seq == 1 and contents(store, "busy") == ["afterwards"]


def test_bad_input_is_refused_before_anything_is_queued(make):
    registry, store = make(max_tokens=None)
    handle = registry.session("bad")

    async def main() -> None:
        with pytest.raises(Exception) as caught:
            await handle.append_async(Message("user", "x" * 10, meta={"bad": object()}))
        assert type(caught.value).__module__.startswith("protocol")
        await handle.append_async("user", "fine")

    asyncio.run(main())
    assert contents(store, "bad") == ["fine"]


def test_a_store_without_group_commit_goes_through_the_mailbox(tmp_path):
    store = ObservedStore(str(tmp_path / "plain.db"), group_commit=False)
    try:
        with SessionRegistry(store) as registry:
            handle = registry.session("plain")

            async def main() -> list[Any]:
                return await asyncio.gather(*(handle.append_async("user", f"m{i}") for i in range(10)))

            stored = asyncio.run(main())
        assert sorted(m.seq for m in stored) == list(range(1, 11))
        assert store.submissions == 0 and store.blocking == 10
    finally:
        store.close()
