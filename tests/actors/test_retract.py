"""handle.retract(): a `Retract` mailbox command ordered with the session's appends,
and the compaction it races (CANCELLED "retracted", or a retracted tail not carried)."""

from __future__ import annotations

import asyncio

import pytest

from actors.testing import GatedCompressor
from protocol import CompressionStatus, Message
from protocol._commands import Retract

from .helpers import conversation, result_of, run_in_thread

S = CompressionStatus
pytestmark = pytest.mark.timeout(60)


def contents(messages):
    return [m.content for m in messages]


def test_retract_pops_in_mailbox_order(make_registry, store):
    registry = make_registry()
    session = registry.session("s")
    assert session.retract() is None
    session.append(conversation(3))
    popped = session.retract()
    assert (popped.content, popped.seq, popped.state) == ("turn 2", 3, "live")
    review = registry.review("s")
    assert review.retract().content == "turn 1"  # review handles may retract too
    assert asyncio.run(session.retract_async()).content == "turn 0"
    assert session.transcript() == []
    assert [(m.seq, m.state) for m in session.archive()] == [(1, "retracted"), (2, "retracted"), (3, "retracted")]
    assert session.append("user", "again").seq == 4
    assert session.ask(Retract()).content == "again"


def test_retract_after_appends_from_many_threads_removes_exactly_one(make_registry, store):
    session = make_registry().session("s")
    threads = [run_in_thread(lambda i=i: session.append("user", f"m{i}")) for i in range(8)]
    for thread, box in threads:
        result_of(thread, box)
    popped = session.retract()
    assert popped.seq == 8  # the last one the mailbox applied
    assert len(session.transcript()) == 7


def test_retracting_the_snapshots_last_message_cancels_the_compaction(make_registry, store):
    gated = GatedCompressor()
    session = make_registry(gated).session("s")
    session.append(conversation(6))
    thread, box = run_in_thread(session.compress)
    assert gated.wait_started(10)
    assert session.retract().content == "turn 5"  # served while the compressor runs
    gated.release()
    outcome = result_of(thread, box)
    assert (outcome.status, outcome.reason) == (S.CANCELLED, "retracted")
    assert contents(store.transcript("s")) == [f"turn {i}" for i in range(5)]
    assert store.compactions("s") == []
    assert store.cooldown("s") is None  # not a failure: no cooldown
    assert store.current_lease("s") is None


def test_a_retracted_tail_message_is_not_carried(make_registry, store):
    gated = GatedCompressor()
    session = make_registry(gated).session("s")
    session.append(conversation(6))
    thread, box = run_in_thread(session.compress)
    assert gated.wait_started(10)
    session.append(Message("user", "kept tail"))
    session.append(Message("assistant", "retracted tail"))
    assert session.retract().content == "retracted tail"
    gated.release()
    outcome = result_of(thread, box)
    assert outcome.status is S.COMPACTED and outcome.record.tail_count == 1
    assert contents(store.transcript("s"))[-1] == "kept tail"
    assert "retracted tail" not in contents(store.transcript("s"))


def test_a_retract_from_another_handle_is_held_until_the_turn_closes(make_registry, store):
    registry = make_registry()
    main, review = registry.session("t"), registry.review("t")
    main.append("user", "before")

    async def scenario():
        async with main.turn():
            await main.append_async("user", "ask")
            retract = asyncio.create_task(review.retract_async())
            await asyncio.sleep(0)  # the retract's request is in the mailbox now
            await main.append_async("assistant", "answer")
            assert not retract.done()
            assert contents(store.transcript("t")) == ["before", "ask", "answer"]
        return await retract

    popped = asyncio.run(scenario())
    assert popped.content == "answer"  # applied after the turn, popping its last message
    assert contents(store.transcript("t")) == ["before", "ask"]


def test_the_turn_owner_may_retract_inside_its_turn(make_registry, store):
    gated = GatedCompressor()
    session = make_registry(gated).session("t")
    session.append(conversation(4))
    with session.turn():
        session.append("user", "ask")
        session.append("assistant", "draft")
        assert session.retract().content == "draft"
        session.append("assistant", "final")
        thread, box = run_in_thread(session.compress)
        assert gated.wait_started(10)
        snapshot = gated.inputs[-1]
        gated.release()
        outcome = result_of(thread, box)
    assert contents(snapshot) == [f"turn {i}" for i in range(4)]  # never into the open turn
    assert outcome.status is S.COMPACTED
    assert contents(store.transcript("t"))[-2:] == ["ask", "final"]
