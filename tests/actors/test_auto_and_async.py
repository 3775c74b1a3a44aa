"""Items 14 (auto-compaction) and 16 (asyncio never blocked) of issue 3."""

from __future__ import annotations

import asyncio
import time

import pytest

from actors.testing import GatedCompressor, ScriptedCompressor
from protocol import CompressionStatus, Message

from .helpers import conversation, wait_until

pytestmark = pytest.mark.timeout(60)


def test_auto_compaction_starts_past_max_tokens_and_appends_keep_flowing(make_registry, store):
    gated = GatedCompressor()
    session = make_registry(gated, max_tokens=200, keep_last=2).session("auto")
    session.append(conversation(4))
    assert gated.calls == 0  # under budget: nothing started

    big = "x" * 800  # ~200 tokens: over the threshold
    session.append("user", big)
    assert gated.wait_started(10), "no automatic attempt past max_tokens"

    during = []
    for i in range(20):
        started = time.monotonic()
        during.append(session.append("assistant" if i % 2 == 0 else "user", f"during {i}"))
        assert time.monotonic() - started < 2.0
    assert gated.calls == 1  # one automatic attempt in flight, not one per append
    gated.release()
    wait_until(lambda: len(store.compactions("auto")) == 1, what="the automatic commit")

    live = [m.content for m in store.transcript("auto")]
    assert live[-20:] == [f"during {i}" for i in range(20)]
    (record,) = store.compactions("auto")
    assert record.tail_count == 20


def test_auto_compaction_backs_off_after_an_attempt_that_did_not_commit(make_registry, store):
    failing = ScriptedCompressor(RuntimeError("no model"))
    session = make_registry(failing, max_tokens=50, cooldown_s=5).session("auto-fail")
    session.append(conversation(2))
    session.append("user", "y" * 400)
    wait_until(lambda: failing.calls == 1, what="the first automatic attempt")
    wait_until(lambda: store.cooldown("auto-fail") is not None, what="the failed attempt's cleanup")
    store.clear_cooldown("auto-fail")  # an operator clears it: only the back-off remains
    for i in range(20):
        session.append("assistant", f"more {i}")
    assert failing.calls == 1
    assert store.current_lease("auto-fail") is None


def test_asyncio_appends_never_block_the_loop(make_registry, store):
    gated = GatedCompressor()
    session = make_registry(gated).session("async")

    async def main():
        gaps: list[float] = []
        stop = asyncio.Event()

        async def heartbeat():
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        beat = asyncio.create_task(heartbeat())
        stored = await asyncio.gather(
            *(session.append_async("user" if i % 2 == 0 else "assistant", f"async {i}") for i in range(100))
        )
        compress = asyncio.create_task(session.compress_async())
        while not gated.started.is_set():
            await asyncio.sleep(0.005)
        more = await asyncio.gather(*(session.append_async(Message("user", f"late {i}")) for i in range(20)))
        cancelled = await session.interrupt_async()
        outcome = await compress
        live = await session.transcript_async()
        stop.set()
        await beat
        return gaps, stored, more, cancelled, outcome, live

    gaps, stored, more, cancelled, outcome, live = asyncio.run(main())

    assert len({m.seq for m in stored}) == 100
    assert sorted(m.content for m in stored) == sorted(f"async {i}" for i in range(100))
    assert len(more) == 20
    assert cancelled is True and outcome.status is CompressionStatus.CANCELLED
    assert len(live) == 120
    # a loop blocked on the gated summary would stall until the interrupt it can never
    # send; a bound of 1 s catches that without failing on a loaded machine, where other
    # threads holding the GIL delay a heartbeat (0.27 s seen with 5 test runs at once)
    assert max(gaps) < 1.0, f"event loop blocked for {max(gaps):.3f}s"
    assert len(gaps) > 5


def test_asyncio_append_restarts_an_evicted_actor(make_registry, store):
    registry = make_registry(idle_timeout_s=0.05)
    session = registry.session("async-evicted")
    session.append("user", "before eviction")
    wait_until(lambda: registry.stats()["resident"] == 0, what="idle eviction")

    async def main():
        return await session.append_async("assistant", "after eviction")

    stored = asyncio.run(main())
    assert stored.session_id == "async-evicted" and stored.seq == 2
    assert [m.content for m in store.transcript("async-evicted")] == ["before eviction", "after eviction"]
