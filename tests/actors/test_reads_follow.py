"""Reads follow the conversation: after another process rotates a session, a handle's
reads (even inside its open turn) return the continuation's live transcript, and the
handle names the live id. Two registries on one database stand for two processes;
the orderings are made by the calls' own order, no sleeps."""

from __future__ import annotations

import asyncio

import pytest

from actors import HeadTailCompressor
from protocol import CompressionStatus, Message

S = CompressionStatus
pytestmark = pytest.mark.timeout(60)


def contents(messages):
    return [m.content for m in messages]


def seeded(store, session_id: str = "x", count: int = 8) -> None:
    store.create_session(session_id)
    store.append(session_id, [Message("user" if i % 2 == 0 else "assistant", f"old {i}") for i in range(count)])


def rotate_elsewhere(make_registry, session_id: str = "x") -> str:
    """Another process's registry rotates the session; the continuation's id."""
    other = make_registry(compressor=HeadTailCompressor(keep_last=1))
    outcome = other.session(session_id).compress(force=True, mode="rotate")
    assert outcome.status is S.ROTATED, outcome
    return outcome.record.child_session_id


def test_a_read_inside_a_turn_returns_the_continuation_after_another_process_rotates(make_registry, store):
    seeded(store)
    handle = make_registry().session("x")
    with handle.turn():
        handle.append("user", "my ask")
        child = rotate_elsewhere(make_registry)
        live = handle.transcript()
        assert live == store.transcript(child)  # never the ended parent's (empty) live rows
        assert contents(live)[-1] == "my ask"  # the open turn travelled in the tail
        assert handle.session_id == child
        assert handle.transcript(limit=1)[0].content == "my ask"
        handle.append("assistant", "my answer")
    assert contents(store.transcript(child))[-2:] == ["my ask", "my answer"]
    assert store.transcript("x") == []
    assert store.current_turn(child) is None  # the lease closed where the turn now lives


def test_a_read_outside_a_turn_and_an_archive_read_follow_too(make_registry, store):
    seeded(store)
    handle = make_registry().session("x")
    assert len(handle.transcript()) == 8  # resident, on the parent
    child = rotate_elsewhere(make_registry)
    assert handle.archive() == store.archive(child)  # the live session's own archive
    assert handle.session_id == child
    assert handle.transcript() == store.transcript(child) != []


def test_a_review_handle_and_the_async_reads_follow(make_registry, store):
    seeded(store)
    registry = make_registry()
    review = registry.review("x")
    assert len(review.transcript()) == 8
    child = rotate_elsewhere(make_registry)

    async def read():
        return await review.transcript_async(), await review.archive_async()

    live, archived = asyncio.run(read())
    assert live == store.transcript(child) != []
    assert archived == store.archive(child)
    assert registry.session("x").session_id == child


def test_a_compress_answered_skipped_names_the_live_id(make_registry, store):
    seeded(store)
    handle = make_registry(compressor=HeadTailCompressor(keep_last=1)).session("x")
    assert len(handle.transcript()) == 8
    child = rotate_elsewhere(make_registry)
    store.arm_cooldown("x", 600, "failed elsewhere")  # the parent's cooldown answers first
    outcome = handle.compress()
    assert outcome.status is S.SKIPPED and outcome.reason == "cooldown", outcome
    assert outcome.session_id == child and outcome.previous_session_id == "x"
    assert handle.session_id == child


def test_the_agents_session_reads_the_continuation_inside_its_turn(make_registry, store):
    pytest.importorskip("agents")
    from actors.integrations.openai_agents import AgentsSession

    seeded(store)
    registry = make_registry()

    async def run():
        session = AgentsSession(registry, "x")
        async with session.turn():
            await session.add_items([{"role": "user", "content": "my ask"}])
            await asyncio.to_thread(rotate_elsewhere, make_registry)
            return await session.get_items()

    items = asyncio.run(run())
    assert items and items[-1] == {"role": "user", "content": "my ask"}
    assert len(items) == len(store.transcript(store.resolve("x")))


def test_an_async_append_following_a_rotation_into_another_holders_turn_is_held(make_registry, store):
    """The continuation carries the other process's open turn: an append that follows
    the rotation there waits for that turn, it is never refused to its caller."""
    import threading

    seeded(store)
    review = make_registry().review("x")
    assert len(review.transcript()) == 8  # resident on the parent, which the other process rotates
    theirs = make_registry(compressor=HeadTailCompressor(keep_last=1)).session("x")
    rotated, go = threading.Event(), threading.Event()

    def their_turn():
        with theirs.turn():
            theirs.append("user", "their ask")
            assert theirs.compress(force=True, mode="rotate").status is S.ROTATED
            rotated.set()
            go.wait(30)
            theirs.append("assistant", "their answer")

    holder = threading.Thread(target=their_turn)
    holder.start()
    assert rotated.wait(30)
    outcome: list[object] = []
    note = threading.Thread(target=lambda: outcome.append(asyncio.run(review.append_async("assistant", "note"))))
    note.start()
    note.join(0.5)
    assert note.is_alive() and not outcome  # held behind their turn, not refused
    go.set()
    holder.join(30)
    note.join(30)
    assert outcome and outcome[0].content == "note"
    assert contents(store.transcript(store.resolve("x")))[-3:] == ["their ask", "their answer", "note"]
