"""Contract: ``append_nowait`` from a running event loop. The submissions of one loop
iteration reach the writer together, after the iteration's task steps, in order;
whatever becomes of the loop or the store, each is answered exactly once.

Real loops, real databases. "Held" (submitted, not yet handed to the writer) is seen
through ``write_stats()``: counted as queued, not committed.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from persistence import open_store
from protocol import InvalidMessageError, Message, SessionNotFoundError, TranscriptError
from tests.actors.helpers import result_of, run_in_thread
from tests.persistence.sqlite.test_append_nowait import Completions

pytestmark = pytest.mark.timeout(60)

#: The writers' ``max_batch`` (a held buffer that reaches it is handed over at once).
MAX_BATCH = {"sqlite": 256, "postgres": 512, "pgbouncer": 512}


def contents(store, session_id: str) -> list[str]:
    return [m.content for m in store.transcript(session_id)]


def user(text: str) -> list[Message]:
    return [Message("user", text)]


def test_one_iterations_submissions_are_one_transaction(store):
    ids = [f"s{k}" for k in range(16)]
    for session_id in ids:
        store.create_session(session_id)
    done = Completions(expected=len(ids))
    before = store.write_stats()

    async def burst() -> int:
        for k, session_id in enumerate(ids):
            assert store.append_nowait(session_id, user(f"m{k}"), done.on_done)
            if k % 4 == 3:
                time.sleep(0.02)  # the GIL is free: a writer handed the first ones would commit them now
        return store.write_stats().requests

    requests_in_iteration = asyncio.run(burst())
    assert requests_in_iteration == before.requests  # held until the iteration ended
    assert done.all_in.wait(10)
    after = store.write_stats()
    assert (after.transactions - before.transactions, after.requests - before.requests) == (1, len(ids))
    assert all(error is None for _, error, _ in done.outcomes)


def test_a_loops_submissions_stay_in_order_and_before_its_blocking_writes(store):
    store.create_session("s")
    done = Completions(expected=9)

    async def submissions() -> None:
        for i in range(3):
            store.append_nowait("s", user(f"a{i}"), done.on_done)
        await asyncio.sleep(0)  # the next iteration
        for i in range(3):
            store.append_nowait("s", user(f"b{i}"), done.on_done)
        store.append("s", user("blocking"))  # waits on this thread: what it holds goes first
        for i in range(3):
            store.append_nowait("s", user(f"c{i}"), done.on_done)

    asyncio.run(submissions())
    assert done.all_in.wait(10)
    assert contents(store, "s") == ["a0", "a1", "a2", "b0", "b1", "b2", "blocking", "c0", "c1", "c2"]


def test_a_full_buffer_is_handed_to_the_writer_at_once(store, backend):
    store.create_session("s")
    limit = MAX_BATCH[backend]
    full, last = Completions(expected=limit), Completions(expected=1)

    async def fill() -> int:
        for i in range(limit):
            store.append_nowait("s", user(f"m{i}"), full.on_done)
        assert full.all_in.wait(20)  # committed while this iteration still runs
        store.append_nowait("s", user("last"), last.on_done)
        return store.write_stats().queued

    assert asyncio.run(fill()) == 1  # the one after it is held again
    assert last.all_in.wait(10)
    assert contents(store, "s") == [f"m{i}" for i in range(limit)] + ["last"]


def test_closing_the_store_runs_what_a_blocked_loop_holds(store, store_url):
    for k in range(3):
        store.create_session(f"s{k}")
    done = Completions(expected=3)
    held, closed = threading.Event(), threading.Event()

    async def hold() -> None:
        for k in range(3):
            store.append_nowait(f"s{k}", user(f"m{k}"), done.on_done)
        held.set()
        assert closed.wait(10)  # the loop is blocked: its hand-over cannot run before the close
        with pytest.raises(TranscriptError, match="closed"):
            store.append_nowait("s0", user("too late"), done.on_done)

    thread, box = run_in_thread(lambda: asyncio.run(hold()))
    assert held.wait(10)
    store.close()
    outcomes = list(done.outcomes)  # all answered before close() returned
    closed.set()
    result_of(thread, box)
    assert [error for _, error, _ in outcomes] == [None, None, None]
    reopened = open_store(store_url)
    try:
        assert [contents(reopened, f"s{k}") for k in range(3)] == [["m0"], ["m1"], ["m2"]]
    finally:
        reopened.close()


def test_a_loop_closed_with_its_hand_over_pending_hands_it_over(store):
    store.create_session("s")
    done = Completions(expected=1)
    loop = asyncio.new_event_loop()
    try:
        loop.call_soon(loop.stop)
        loop.call_soon(store.append_nowait, "s", user("x"), done.on_done)
        loop.run_forever()  # one iteration: the hand-over was left for the next one, which never runs
        assert not done.all_in.wait(0.2) and store.write_stats().queued == 1  # held
    finally:
        loop.close()  # drops the pending callback
    assert done.all_in.wait(10)
    assert done.outcomes[0][1] is None and contents(store, "s") == ["x"]


def test_a_stopped_loops_submissions_go_with_the_next_blocking_write(store):
    store.create_session("s")
    store.create_session("t")
    done = Completions(expected=1)
    loop = asyncio.new_event_loop()
    try:
        loop.call_soon(loop.stop)
        loop.call_soon(store.append_nowait, "s", user("held"), done.on_done)
        loop.run_forever()
        assert not done.all_in.wait(0.2) and store.write_stats().queued == 1  # held
        store.append("t", user("elsewhere"))  # a thread about to wait hands over a stopped loop's
        assert done.all_in.wait(10)
        assert contents(store, "s") == ["held"]
    finally:
        loop.close()


def test_a_stopped_loops_submissions_go_before_a_later_one_of_its_thread_off_the_loop(store):
    store.create_session("s")
    done = Completions(expected=2)
    loop = asyncio.new_event_loop()
    try:
        loop.call_soon(loop.stop)
        loop.call_soon(store.append_nowait, "s", user("first"), done.on_done)
        loop.run_forever()  # held: its hand-over was left for an iteration that has not run
        store.append_nowait("s", user("second"), done.on_done)  # the same thread, later, no loop
        assert done.all_in.wait(10)
        assert contents(store, "s") == ["first", "second"]
    finally:
        loop.close()


def test_a_stopped_loops_submissions_go_before_those_of_the_next_loop_of_its_thread(store):
    store.create_session("s")
    done = Completions(expected=2)
    loop = asyncio.new_event_loop()
    try:
        loop.call_soon(loop.stop)
        loop.call_soon(store.append_nowait, "s", user("first"), done.on_done)
        loop.run_forever()

        async def next_loop() -> None:
            store.append_nowait("s", user("second"), done.on_done)

        asyncio.run(next_loop())  # the same thread, later, another loop
        assert done.all_in.wait(10)
        assert contents(store, "s") == ["first", "second"]
    finally:
        loop.close()


def test_an_append_held_longer_than_patience_s_is_not_refused_for_it(store_url):
    """``patience_s`` bounds a write's wait for the database (queue included), not the
    time a loop kept it before handing it over: nobody was waiting for anything."""
    store = open_store(store_url, patience_s=0.3)
    try:
        store.create_session("s")
        done = Completions(expected=1)
        loop = asyncio.new_event_loop()
        try:
            loop.call_soon(loop.stop)
            loop.call_soon(store.append_nowait, "s", user("x"), done.on_done)
            loop.run_forever()  # held: its hand-over is left for the loop's next run
            time.sleep(0.5)  # the scenario, not a wait: the loop stays idle past patience_s
            loop.run_until_complete(asyncio.sleep(0))  # the hand-over runs now
            assert done.all_in.wait(10)
        finally:
            loop.close()
        assert done.outcomes[0][1] is None and contents(store, "s") == ["x"]
    finally:
        store.close()


class RefusingLoop(asyncio.SelectorEventLoop):
    """Injects the fault: ``call_soon`` refuses (as a closing loop does) while ``refuse``."""

    refuse = False

    def call_soon(self, *args, **kwargs):  # type: ignore[override]
        if self.refuse:
            raise RuntimeError("Event loop is closed")
        return super().call_soon(*args, **kwargs)


def test_a_submission_whose_hand_over_cannot_be_scheduled_goes_at_once(store):
    store.create_session("s")
    done = Completions(expected=1)
    loop = RefusingLoop()

    async def submit() -> bool:
        loop.refuse = True
        try:
            assert store.append_nowait("s", user("x"), done.on_done)  # submitted, not raised
        finally:
            loop.refuse = False
        return done.all_in.wait(10)  # committed while this iteration still runs

    try:
        assert loop.run_until_complete(submit())
    finally:
        loop.close()
    assert contents(store, "s") == ["x"]


def test_errors_from_a_loop(store):
    store.create_session("here")
    done = Completions(expected=2)

    async def submissions() -> int:
        with pytest.raises(InvalidMessageError):
            store.append_nowait("here", [Message("nobody", "x")], done.on_done)
        queued = store.write_stats().queued  # the refused one is not held
        store.append_nowait("missing", user("lost"), done.on_done)
        store.append_nowait("here", user("kept"), done.on_done)
        return queued

    assert asyncio.run(submissions()) == 0
    assert done.all_in.wait(10)
    (_, missing, _), (built, kept, _) = done.outcomes
    assert isinstance(missing, SessionNotFoundError) and kept is None
    assert built()[0].content == "kept" and contents(store, "here") == ["kept"]
    store.close()

    async def after_close() -> None:
        store.append_nowait("here", user("late"), done.on_done)

    with pytest.raises(TranscriptError, match="closed"):
        asyncio.run(after_close())
