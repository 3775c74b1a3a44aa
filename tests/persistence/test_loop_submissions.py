"""`HandOverLock`: the lock a held submission may hold (an actor's exclusive lock).
Its waiters hand held submissions over, and it keeps a lock's timeouts."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from persistence.loop_submissions import HandOverLock
from persistence.sqlite import SqliteStore
from protocol import Message
from tests.actors.helpers import result_of, run_in_thread

pytestmark = pytest.mark.timeout(30)


def test_a_waiter_keeps_its_timeout_and_a_free_lock_is_a_plain_lock():
    lock = HandOverLock()
    assert lock.acquire(blocking=False) and lock.locked()
    assert not lock.acquire(blocking=False)
    started = time.monotonic()
    thread, box = run_in_thread(lambda: lock.acquire(timeout=0.3))
    assert result_of(thread, box) is False and time.monotonic() - started >= 0.3
    lock.release()
    with lock:
        assert lock.locked()
    assert not lock.locked()


@pytest.mark.parametrize("held", [False, True], ids=["free", "held"])
def test_the_timeouts_a_lock_refuses_are_refused(held):
    """As `threading.Lock`, free or held: a non-blocking call with a timeout, or a
    negative timeout other than -1 (a deadline already past, say), raises ValueError
    instead of being taken for "try once" or "wait for ever"."""
    lock = HandOverLock()
    if held:
        lock.acquire()
    try:
        for args, kwargs in (((False, 1.0), {}), ((), {"timeout": -0.5})):
            thread, box = run_in_thread(lambda: lock.acquire(*args, **kwargs))
            with pytest.raises(ValueError):
                result_of(thread, box, timeout=5)
        assert lock.locked() is held
    finally:
        if lock.locked():
            lock.release()  # (a waiter stuck for ever would take it and end)


def test_a_waiter_hands_over_the_held_submission_that_holds_the_lock(tmp_path):
    store = SqliteStore(str(tmp_path / "state.db"))
    lock = HandOverLock()
    waited = threading.Event()
    try:
        store.create_session("s")

        def released(built, error):  # the writer's completion lets the lock go
            lock.release()

        async def hold() -> list[str]:
            lock.acquire()
            store.append_nowait("s", [Message("user", "x")], released)  # held by this loop
            # same iteration: the loop waits for a thread that waits for the lock
            thread, box = run_in_thread(lambda: (lock.acquire(), lock.release(), waited.set()))
            result_of(thread, box, timeout=10)
            return [m.content for m in store.transcript("s")]

        assert asyncio.run(hold()) == ["x"] and waited.is_set()
    finally:
        store.close()
