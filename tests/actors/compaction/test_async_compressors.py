"""``async def compress`` runs on the registry's one event loop thread; cancel cancels it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from actors import HeadTailCompressor
from actors.testing import summary_only
from protocol import CompressionStatus, Message
from tests.actors.helpers import conversation, result_of, run_in_thread

pytestmark = pytest.mark.timeout(60)

LOOP_THREAD = "session-actors-compressors"


class AsyncCompressor:
    """Records the loop and thread each call ran on; ``hold`` makes it wait forever."""

    name = "async-test"

    def __init__(self, *, hold: bool = False, fail: bool = False) -> None:
        self.hold = hold
        self.fail = fail
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.threads: list[str] = []
        self.started = threading.Event()
        self.cancelled = threading.Event()

    async def compress(self, messages, *, target_tokens, cancel):
        self.loops.append(asyncio.get_running_loop())
        self.threads.append(threading.current_thread().name)
        self.started.set()
        try:
            if self.hold:
                await asyncio.Event().wait()  # only a task cancel ends this
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        if self.fail:
            raise RuntimeError("endpoint said no")
        return summary_only(messages)


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == LOOP_THREAD]


def test_async_compressors_share_one_loop_thread_owned_by_the_registry(make_registry):
    compressor = AsyncCompressor()
    registry = make_registry(compressor)
    for sid in ("a1", "a2"):
        s = registry.session(sid)
        s.append(conversation(6))
        assert s.compress().status is CompressionStatus.COMPACTED
        assert s.transcript()[-1].text.startswith("[CONTEXT COMPACTION]")
    assert len(set(map(id, compressor.loops))) == 1  # one loop for every attempt
    assert compressor.threads == [LOOP_THREAD, LOOP_THREAD]
    assert len(loop_threads()) == 1
    registry.close()
    assert loop_threads() == []  # close() stopped it
    assert compressor.loops[0].is_closed()


def test_a_sync_compressor_starts_no_loop_thread(make_registry):
    registry = make_registry(HeadTailCompressor(keep_last=2))
    s = registry.session("sync")
    s.append(conversation(8))
    assert s.compress().status is CompressionStatus.COMPACTED
    assert loop_threads() == []


def test_interrupt_cancels_the_async_task_within_a_second(make_registry):
    compressor = AsyncCompressor(hold=True)
    registry = make_registry(compressor)
    s = registry.session("held")
    before = s.append(conversation(6))
    thread, box = run_in_thread(s.compress)
    assert compressor.started.wait(10)
    assert s.interrupt() is True
    assert compressor.cancelled.wait(1.0), "the compressor task was not cancelled within 1 s"
    outcome = result_of(thread, box)
    assert (outcome.status, outcome.reason) == (CompressionStatus.CANCELLED, "interrupted")
    assert [m.id for m in s.transcript()] == [m.id for m in before]
    assert s.append("user", "appends still work").content == "appends still work"


def test_a_timeout_cancels_the_async_task(make_registry):
    compressor = AsyncCompressor(hold=True)
    registry = make_registry(compressor, max_compaction_s=0.3)
    s = registry.session("slow")
    s.append(conversation(6))
    outcome = s.compress()
    assert (outcome.status, outcome.reason) == (CompressionStatus.CANCELLED, "timeout")
    assert compressor.cancelled.wait(1.0)


def test_an_async_compressor_error_is_failed_with_a_cooldown(make_registry):
    registry = make_registry(AsyncCompressor(fail=True))
    s = registry.session("boom")
    s.append([Message("user", "q"), Message("assistant", "a"), Message("user", "q2")])
    outcome = s.compress()
    assert (outcome.status, outcome.reason) == (CompressionStatus.FAILED, "compressor_error")
    assert "endpoint said no" in outcome.error
    assert registry.store.cooldown(s.session_id).error == outcome.error
