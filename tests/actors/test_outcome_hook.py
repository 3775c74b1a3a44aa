"""``on_outcome`` (once per attempt, after cleanup and callers, on a registry thread) and
``session_async`` / ``review_async`` (never block the event loop)."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from actors import SessionRegistry
from actors.testing import GatedCompressor, ScriptedCompressor
from protocol import CompressionStatus, InvalidArgumentError

from .helpers import Blocker, conversation, result_of, run_in_thread, wait_until

S = CompressionStatus
pytestmark = pytest.mark.timeout(60)


class Hook:
    """Records every call: the outcome, the thread it ran on, what the store said then."""

    def __init__(self, store, *, block: threading.Event | None = None) -> None:
        self.store = store
        self.calls: list[tuple] = []
        self.called = threading.Event()
        self.block = block

    def __call__(self, outcome) -> None:
        lease = self.store.current_lease(outcome.session_id)
        self.calls.append((outcome, threading.current_thread(), lease))
        self.called.set()
        if self.block is not None:
            assert self.block.wait(20)


def test_joined_callers_share_one_call_after_cleanup_off_the_actor_thread(make_registry, store):
    gated = GatedCompressor()
    hook = Hook(store)
    registry = make_registry(gated, on_outcome=hook)
    session = registry.session("o1")
    session.append(conversation(6))
    first = run_in_thread(session.compress)
    assert gated.wait_started(10)
    second = run_in_thread(session.compress)
    wait_until(lambda: registry.stats()["compress_requests"] == 2, what="the second caller joined")
    gated.release()
    outcomes = [result_of(*first), result_of(*second)]
    assert outcomes[0] is outcomes[1] and outcomes[0].status is S.COMPACTED
    registry.close()  # delivers what is queued, then stops the hook's thread

    assert len(hook.calls) == 1
    outcome, thread, lease_then = hook.calls[0]
    assert outcome is outcomes[0]
    assert lease_then is None  # the lease was released before the hook ran
    assert thread.name == "registry-outcomes"


def test_automatic_attempts_are_reported_and_a_slow_hook_delays_nothing(make_registry, store):
    release_hook = threading.Event()
    hook = Hook(store, block=release_hook)
    registry = make_registry(
        ScriptedCompressor(lambda ms: [ms[0].as_message(), ms[-1].as_message()]),
        on_outcome=hook,
        max_tokens=100,
        keep_last=1,
        ask_timeout_s=10,
    )  # an append stuck behind the hook (20 s) fails
    session = registry.session("o2")
    session.append(conversation(2))
    session.append("user", "z" * 600)  # over budget: an automatic attempt, nobody waits on it
    assert hook.called.wait(10)
    assert hook.calls[0][0].status is S.COMPACTED
    # the hook is still blocked: appends and an explicit compress go on regardless
    session.append("assistant", "while the hook sleeps")
    explicit = session.compress(force=True)
    assert explicit.status in (S.COMPACTED, S.UNCHANGED)
    release_hook.set()
    registry.close()
    assert [c[0] for c in hook.calls] == [hook.calls[0][0], explicit]


def test_a_raising_hook_is_logged_and_ignored(make_registry, store, caplog):
    calls = []

    def hook(outcome):
        calls.append(outcome)
        raise RuntimeError("hook bug")

    caplog.set_level(logging.ERROR, logger="session_actors")
    registry = make_registry(ScriptedCompressor(RuntimeError("no model")), on_outcome=hook, cooldown_s=0)
    session = registry.session("o3")
    session.append(conversation(4))
    assert session.compress().status is S.FAILED
    assert session.compress().status is S.FAILED
    registry.close()
    assert len(calls) == 2
    assert sum("on_outcome hook raised" in r.getMessage() for r in caplog.records) == 2


def test_on_outcome_must_be_callable(store):
    with pytest.raises(InvalidArgumentError):
        SessionRegistry(store, on_outcome="print")


@pytest.mark.parametrize("kind", ["session", "review"])
def test_starting_a_session_from_asyncio_never_blocks_the_loop(make_registry, store, kind):
    registry = make_registry(faulty=True)
    blocker = Blocker()
    registry.store.hooks["get_session"] = blocker

    async def scenario():
        start = getattr(registry, f"{kind}_async")
        task = asyncio.create_task(start("o4", source="web"))
        ticks = 0
        while not blocker.entered.is_set():  # the loop runs while the start is stuck in the store
            ticks += 1
            await asyncio.sleep(0.001)
        for _ in range(5):
            ticks += 1
            await asyncio.sleep(0)
        assert not task.done()
        blocker.release.set()
        handle = await task
        await handle.append_async("user", "hello")
        return ticks

    assert asyncio.run(scenario()) >= 5
    assert [m.content for m in store.transcript("o4")] == ["hello"]
    assert store.get_session("o4").source == "web"
