"""Dead turns are sealed, keyed turns run once: a real worker process holds the turn
on the same database and is killed with SIGKILL mid-turn (after its assistant message
called a tool), synchronized by its stdin/stdout pipes; the lease is short so the
survivor goes on within a test's time."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from actors import CompactionPolicy, HeadTailCompressor, SessionRegistry
from protocol import CompressionStatus, InvalidMessageError, Message, TurnReplayedError

from .test_turns_across_processes import _expect, _finish, _worker

TTL_S = 1.0
pytestmark = pytest.mark.timeout(120)


def contents(messages):
    return [m.content for m in messages]


def registry_of(store, **policy) -> SessionRegistry:
    return SessionRegistry(store, compressor=HeadTailCompressor(keep_last=1), policy=CompactionPolicy(**policy))


def killed_mid_tool_call(store_url: str, key: str = "-") -> None:
    """A worker opens a turn, asks, calls a tool, and dies (kill -9) before the result."""
    proc = _worker("tool", store_url, "s", str(TTL_S), key)
    try:
        _expect(proc, "opened")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        _finish(proc)


def assert_every_call_answered(transcript) -> None:
    """What a chat API checks: each tool call is followed by its result, each result
    answers a call made before it."""
    called: set[str] = set()
    for i, m in enumerate(transcript):
        if m.role == "tool":
            assert m.tool_call_id in called, f"result {m.tool_call_id!r} without its call: {contents(transcript)}"
        for call in m.tool_calls or ():
            called.add(call["id"])
            later = {r.tool_call_id for r in transcript[i + 1 :] if r.role == "tool"}
            assert call["id"] in later, f"call {call['id']!r} without its result: {contents(transcript)}"


@pytest.mark.parametrize(
    ("dead_turn", "live"),
    [
        ("seal", ["before", "worker ask", "after"]),  # the ask stays, the dangling call goes
        ("rollback", ["before", "after"]),
        ("keep", ["before", "worker ask", None, "after"]),
    ],
)
def test_a_turn_killed_mid_tool_call_is_sealed_before_the_next_append(store_url, store, dead_turn, live):
    registry = registry_of(store, lease_ttl_s=TTL_S, dead_turn=dead_turn)
    try:
        registry.session("s").append("user", "before")
        killed_mid_tool_call(store_url)
        registry.review("s").append("assistant", "after")  # held until the lease lapses, then sealed
        transcript = registry.session("s").transcript()
    finally:
        registry.close()
    assert contents(transcript) == live
    if dead_turn != "keep":
        assert_every_call_answered(transcript)
        archived = [(m.role, m.state) for m in store.archive("s")]
        assert ("assistant", "retracted") in archived  # archived as every retract, never deleted


def test_a_dead_turn_is_sealed_before_another_turn_opens(store_url, store):
    registry = registry_of(store, lease_ttl_s=TTL_S)
    try:
        killed_mid_tool_call(store_url)
        handle = registry.session("s")
        with handle.turn():
            handle.append("user", "next ask")
            handle.append("assistant", "next answer")
        transcript = handle.transcript()
    finally:
        registry.close()
    assert contents(transcript) == ["worker ask", "next ask", "next answer"]
    assert_every_call_answered(transcript)


def test_a_compaction_seals_a_dead_turn_before_its_snapshot(store_url, store):
    store.create_session("s")
    store.append("s", [Message("user" if i % 2 == 0 else "assistant", f"old {i}") for i in range(6)])
    killed_mid_tool_call(store_url)
    # the lease lapses on the store's clock: wait for it without sleeping on hope
    registry = registry_of(store, lease_ttl_s=TTL_S)
    try:
        _wait_lapsed(store, "s")
        outcome = registry.session("s").compress(force=True)
        assert outcome.status is CompressionStatus.COMPACTED, outcome
        transcript = registry.session("s").transcript()
    finally:
        registry.close()
    assert_every_call_answered(transcript)
    assert all(not m.tool_calls for m in transcript)


def test_a_keyed_turn_completed_elsewhere_replays_and_writes_nothing(store_url, store):
    proc = _worker("tool", store_url, "s", "30", "evt-1")
    try:
        _expect(proc, "opened")
        registry = registry_of(store)
        try:
            handle = registry.session("s")
            outcome: list[object] = []
            entered = threading.Event()

            def redelivered():
                turn = handle.turn(key="evt-1")
                with turn:
                    entered.set()
                    outcome.append(turn)
                    with pytest.raises(TurnReplayedError):
                        handle.append("user", "worker ask")  # the redelivered ask: never stored twice
                    with pytest.raises(TurnReplayedError):
                        handle.retract()

            thread = threading.Thread(target=redelivered)
            thread.start()
            assert not entered.wait(0.5)  # turn evt-1 is open in the worker: this one waits
            proc.stdin.write("go\n")
            proc.stdin.flush()
            _expect(proc, "closed")
            thread.join(30)
            assert not thread.is_alive()
            (turn,) = outcome
            assert turn.replayed
            assert contents(turn.messages) == ["worker ask", None, "12 C", "worker answer"]
            assert turn.messages == handle.transcript()
            with handle.turn(key="evt-2") as fresh:  # another key opens a turn of its own
                fresh.append("user", "second event")
            handle.append("user", "after the replay")  # the handle writes again after the block
        finally:
            registry.close()
    finally:
        _finish(proc)


@pytest.mark.parametrize("held_first", [False, True], ids=["alone", "behind-a-held-append"])
@pytest.mark.parametrize("on_busy", ["interrupt", "rollback"])
def test_a_keyed_turn_never_interrupts_nor_rolls_back_its_own_key(store_url, store, on_busy, held_first):
    proc = _worker("tool", store_url, "s", "30", "evt-1")
    try:
        _expect(proc, "opened")
        registry = registry_of(store)
        try:
            handle = registry.session("s")
            review = threading.Thread(target=lambda: registry.review("s").append("assistant", "review note"))
            if held_first:  # this registry already holds calls behind the worker's turn
                review.start()
                review.join(0.5)
                assert review.is_alive()
            turns: list[object] = []
            other = threading.Thread(target=lambda: turns.append(_replayed_turn(handle, "evt-1", on_busy)))
            other.start()
            other.join(0.5)
            assert other.is_alive()  # waits for the first delivery's turn
            proc.stdin.write("go\n")
            proc.stdin.flush()
            _expect(proc, "closed")  # never asked to end ("closed interrupted")
            other.join(30)
            if held_first:
                review.join(30)
            (turn,) = turns
            assert turn.replayed and contents(turn.messages) == ["worker ask", None, "12 C", "worker answer"]
            live = contents(handle.transcript())
            assert live[:4] == ["worker ask", None, "12 C", "worker answer"]
            assert live[4:] == (["review note"] if held_first else [])
        finally:
            registry.close()
    finally:
        _finish(proc)


def _replayed_turn(handle, key, on_busy):
    turn = handle.turn(on_busy=on_busy, key=key)
    with turn:
        pass
    return turn


def test_a_replay_after_a_compaction_gives_kept_copies_and_summarized_originals(store):
    registry = registry_of(store)
    try:
        handle = registry.session("s")
        for n in range(3):
            with handle.turn(key=f"evt-{n}"):
                handle.append("user", f"ask {n}")
                handle.append("assistant", f"answer {n}")
        before = {n: _replayed(handle, f"evt-{n}") for n in range(3)}
        assert registry.session("s").compress(force=True, mode="rotate").status is CompressionStatus.ROTATED
        after = {n: _replayed(handle, f"evt-{n}") for n in range(3)}
    finally:
        registry.close()
    for n in range(3):
        assert contents(after[n]) == contents(before[n]) == [f"ask {n}", f"answer {n}"]
    # the head-tail compressor kept the first ask and the last turn verbatim: their
    # live copies answer; the archived originals answer for what it summarized
    kept = [before[0][0], *before[2]]
    assert [m.origin_id for m in (after[0][0], *after[2])] == [m.id for m in kept]
    assert {m.state for m in (after[0][0], *after[2])} == {"live"}
    summarized = [after[0][1], *after[1]]
    assert [m.id for m in summarized] == [before[0][1].id, *(m.id for m in before[1])]
    assert {m.state for m in summarized} == {"compacted"}


def _replayed(handle, key):
    turn = handle.turn(key=key)
    with turn:
        assert turn.replayed
        return turn.messages


def test_a_keyed_turn_whose_holder_died_opens_afresh_once_sealed(store_url, store):
    killed_mid_tool_call(store_url, key="evt-9")
    registry = registry_of(store, lease_ttl_s=TTL_S)
    try:
        handle = registry.session("s")
        turn = handle.turn(key="evt-9")
        with turn:
            assert not turn.replayed  # the dead one was sealed: the event runs again
            handle.append("assistant", "answered after the crash")
        again = handle.turn(key="evt-9")
        with again:
            assert again.replayed
        transcript = handle.transcript()
    finally:
        registry.close()
    assert contents(transcript) == ["worker ask", "answered after the crash"]
    assert contents(again.messages) == ["answered after the crash"]


def test_keyed_turns_through_async_with_and_bad_keys(store):
    registry = registry_of(store)

    async def run():
        handle = await registry.session_async("s")
        async with handle.turn(key="evt-a") as h:
            await h.append_async("user", "ask")
        turn = handle.turn(key="evt-a")
        async with turn:
            with pytest.raises(TurnReplayedError):
                await handle.append_async("user", "ask")
        return turn

    try:
        turn = asyncio.run(run())
        assert turn.replayed and contents(turn.messages) == ["ask"]
        for bad in ("", " padded", "x" * 10_000, 42):
            with pytest.raises(InvalidMessageError):
                registry.session("s").turn(key=bad)
        assert contents(registry.session("s").transcript()) == ["ask"]
    finally:
        registry.close()


def _wait_lapsed(store, session_id: str) -> None:
    """Until the dead turn's lease lapsed on the store's clock (its expiry is known)."""
    from .helpers import wait_until

    wait_until(lambda: store.current_turn(session_id) is None, timeout=TTL_S + 10, what="the lease to lapse")
