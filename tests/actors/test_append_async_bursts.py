"""``append_async`` from many tasks of one event loop: the appends a loop iteration
submits reach the store's writer together (`persistence.loop_submissions`), and the
session's exclusive lock, held from submission to commit, is let go whatever becomes
of the loop or the awaiting task. Real registries, stores and loops."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from actors import CompactionPolicy, SessionRegistry
from persistence import open_store

from .helpers import result_of, run_in_thread

pytestmark = pytest.mark.timeout(60)

#: Short enough that an append stuck behind a held one fails the test quickly.
ASK_TIMEOUT_S = 5.0


@pytest.fixture
def opened(store_url: str) -> Iterator[tuple[SessionRegistry, Any]]:
    store = open_store(store_url)
    registry = SessionRegistry(store, policy=CompactionPolicy(ask_timeout_s=ASK_TIMEOUT_S, max_resident=64))
    try:
        yield registry, store
    finally:
        registry.close()
        store.close()


def warm(registry: SessionRegistry, count: int) -> list[Any]:
    """``count`` handles whose actors are resident (each has appended "warm")."""
    handles = [registry.session(f"s{k}") for k in range(count)]
    for handle in handles:
        handle.append("user", "warm")
    return handles


def contents(handle: Any) -> list[str]:
    return [m.content for m in handle.transcript()]


def test_a_burst_of_tasks_on_a_loop_in_another_thread_commits_together(opened):
    registry, store = opened
    handles = warm(registry, 32)

    async def burst() -> list[Any]:
        loop = asyncio.get_running_loop()
        tasks = []
        for k, handle in enumerate(handles):
            tasks.append(asyncio.ensure_future(handle.append_async("user", f"m{k}")))
            if k % 8 == 7:  # between the task steps: the GIL is free, a writer handed some would commit
                loop.call_soon(time.sleep, 0.02)
        return await asyncio.gather(*tasks)

    before = store.write_stats()
    thread, box = run_in_thread(lambda: asyncio.run(burst()))  # not the thread that opened the store
    stored = result_of(thread, box)
    after = store.write_stats()
    assert [m.content for m in stored] == [f"m{k}" for k in range(32)]
    assert after.requests - before.requests >= 32
    assert after.transactions - before.transactions <= 2  # one (and room for a lease reap)
    assert all(contents(h) == ["warm", f"m{k}"] for k, h in enumerate(handles))


def test_a_task_cancelled_while_its_append_is_held_leaves_it_applied_once(opened):
    registry, store = opened
    (handle,) = warm(registry, 1)
    queued_at_cancel: list[int] = []

    async def cancelled() -> None:
        task = asyncio.ensure_future(handle.append_async("user", "x"))

        def cancel() -> None:  # after the task's step, in the same iteration: the append is held
            time.sleep(0.1)  # not a wait: the GIL is free, a writer that had the append would take it
            queued_at_cancel.append(store.write_stats().queued)
            task.cancel()

        asyncio.get_running_loop().call_soon(cancel)
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert queued_at_cancel == [1]
    handle.append("user", "after")  # the exclusive lock was let go (else: TimeoutError)
    assert contents(handle) == ["warm", "x", "after"]


def test_a_loop_closed_while_it_holds_an_append_lets_the_session_go(opened):
    registry, store = opened
    (handle,) = warm(registry, 1)
    loop = asyncio.new_event_loop()
    try:
        loop.call_soon(loop.stop)
        task = loop.create_task(handle.append_async("user", "x"))
        loop.run_forever()  # one iteration: stop, then the task's step submits; its hand-over never runs
        time.sleep(0.1)  # not a wait: the GIL is free, a writer that had the append would take it
        assert store.write_stats().queued == 1 and not task.done()
    finally:
        loop.close()
    handle.append("user", "after")
    assert contents(handle) == ["warm", "x", "after"]


def test_a_blocking_call_on_the_loop_does_not_wait_for_its_own_held_append(opened):
    registry, _ = opened
    (handle,) = warm(registry, 1)
    seen: list[list[str]] = []

    async def mixed() -> Any:
        appended = asyncio.ensure_future(handle.append_async("user", "a"))
        # after the task's step, same iteration: blocks the loop on the actor, which
        # waits for the held append's exclusive lock
        asyncio.get_running_loop().call_soon(lambda: seen.append(contents(handle)))
        return await appended

    started = time.monotonic()
    assert asyncio.run(mixed()).content == "a"
    assert seen == [["warm", "a"]] and time.monotonic() - started < ASK_TIMEOUT_S


def test_asyncio_run_teardown_cancelling_appending_tasks_leaves_each_applied_once(opened):
    registry, _ = opened
    handles = warm(registry, 8)
    submitted = threading.Event()

    async def main() -> None:
        for handle in handles:
            asyncio.ensure_future(handle.append_async("user", "late"))
        await asyncio.sleep(0)  # their steps run (submitted), then main returns: the rest is cancelled
        submitted.set()

    asyncio.run(main())
    assert submitted.is_set()
    for handle in handles:
        handle.append("user", "after")
    assert all(contents(h) == ["warm", "late", "after"] for h in handles)


def test_a_loop_blocked_on_another_threads_call_to_its_held_session_is_not_stuck(opened):
    registry, _ = opened
    (handle,) = warm(registry, 1)
    seen: list[list[str]] = []

    async def mixed() -> Any:
        appended = asyncio.ensure_future(handle.append_async("user", "a"))

        def wait_for_a_thread() -> None:  # same iteration: the loop waits for a thread that
            thread, box = run_in_thread(lambda: contents(handle))  # waits for the held append
            seen.append(result_of(thread, box, timeout=3 * ASK_TIMEOUT_S))

        asyncio.get_running_loop().call_soon(wait_for_a_thread)
        return await appended

    started = time.monotonic()
    assert asyncio.run(mixed()).content == "a"
    assert seen == [["warm", "a"]] and time.monotonic() - started < ASK_TIMEOUT_S


def test_closing_the_registry_on_the_loop_that_holds_an_append(store_url):
    store = open_store(store_url)
    try:
        registry = SessionRegistry(store, policy=CompactionPolicy(ask_timeout_s=ASK_TIMEOUT_S))
        handle = registry.session("s")
        handle.append("user", "warm")

        async def close_while_held() -> Any:
            appended = asyncio.ensure_future(handle.append_async("user", "x"))
            # same iteration, after the task's step: stops the actor (idle: no message) on
            # this thread, which waits for the held append's exclusive lock
            asyncio.get_running_loop().call_soon(registry.close)
            return await appended

        started = time.monotonic()
        assert asyncio.run(close_while_held()).content == "x"
        assert time.monotonic() - started < ASK_TIMEOUT_S
        assert contents_of(store, "s") == ["warm", "x"]
    finally:
        store.close()


def test_an_append_a_stopped_loop_held_past_patience_s_commits_when_it_runs_again(store_url):
    """Fire and forget at the end of ``run_until_complete``: the task's append is held
    until the loop runs again, however long after; it is not refused for that wait."""
    store = open_store(store_url, patience_s=0.3)
    registry = SessionRegistry(store, policy=CompactionPolicy(ask_timeout_s=ASK_TIMEOUT_S))
    loop = asyncio.new_event_loop()
    try:
        (handle,) = warm(registry, 1)

        async def fire_and_forget() -> asyncio.Task[Any]:
            return asyncio.ensure_future(handle.append_async("user", "x"))

        task = loop.run_until_complete(fire_and_forget())  # its step submits in the last iteration
        assert not task.done() and store.write_stats().queued == 1  # held
        time.sleep(0.5)  # the scenario, not a wait: the loop stays idle past patience_s
        assert loop.run_until_complete(task).content == "x"
        assert contents(handle) == ["warm", "x"]
    finally:
        loop.close()
        registry.close()
        store.close()


def contents_of(store: Any, session_id: str) -> list[str]:
    return [m.content for m in store.transcript(session_id)]
