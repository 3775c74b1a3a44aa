"""Turns (docs/turns.md): a handle's turn is contiguous in the database.

Real stores and threads. Orderings that matter are made deterministic with one event
loop: a coroutine's request is sent before its first await, so ``asyncio.sleep(0)``
after starting a task means its request is in the mailbox.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from actors import AskTimeoutError
from actors.testing import GatedCompressor
from protocol import CompressionStatus, Message

from .helpers import conversation, result_of, run_in_thread, wait_until

S = CompressionStatus
pytestmark = pytest.mark.timeout(60)


def contents(messages):
    return [m.content for m in messages]


def tool_turn(tag: str) -> list[Message]:
    """One user turn with a tool call: ask, call, result, answer."""
    call = {"id": f"call-{tag}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return [
        Message("user", f"ask {tag}", meta={"turn": tag}),
        Message("assistant", "", tool_calls=[call], meta={"turn": tag}),
        Message("tool", f"result {tag}", tool_call_id=f"call-{tag}", meta={"turn": tag}),
        Message("assistant", f"answer {tag}", meta={"turn": tag}),
    ]


def assert_turns_contiguous(rows, turns: int) -> None:
    """Each turn's rows sit at consecutive positions of the seq-ordered rows."""
    positions: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        if "turn" in row.meta:
            positions.setdefault(row.meta["turn"], []).append(index)
    assert len(positions) == turns
    for tag, found in positions.items():
        assert found == list(range(found[0], found[0] + 4)), f"turn {tag} split: {found}"


# -- the hammer: a review path appends while turns run ------------------------------------


def test_review_hammering_never_lands_inside_a_turn(make_registry, store):
    registry = make_registry()
    main, review = registry.session("t1"), registry.review("t1")
    inside: list[int | None] = [None]  # the turn the main path is inside of, if any
    done = threading.Event()
    sent_inside, violations, notes = [0], [], []

    # a turn takes the store's turn lease, so a note queued while it opens is held
    # behind it: "opening" marks the whole span, from before the open to after the close
    opening: list[int | None] = [None]
    raced = threading.Event()

    def hammer() -> None:
        i = 0
        while not done.is_set():
            before = inside[0]
            if opening[0] is not None:
                sent_inside[0] += 1
                raced.set()
            stored = review.append("assistant", f"note {i}", meta={"review": True})
            if before is not None and inside[0] == before:
                violations.append((i, before))  # applied while that turn was still open
            notes.append(stored.id)
            i += 1

    thread, box = run_in_thread(hammer)
    turns = 0
    deadline = time.monotonic() + 20
    while turns < 20 or (sent_inside[0] < 5 and time.monotonic() < deadline):
        opening[0] = turns
        raced.clear()
        with main.turn():
            inside[0] = turns
            if turns < 10:
                raced.wait(0.5)  # a note sent as this turn opened is held behind it
            for message in tool_turn(str(turns)):
                main.append(message)
            inside[0] = None
        opening[0] = None
        turns += 1
    done.set()
    result_of(thread, box)

    assert sent_inside[0] >= 5, "the review path never raced a turn"
    assert violations == []
    rows = store.transcript("t1")
    assert_turns_contiguous(rows, turns)
    assert {r.id for r in rows if r.meta.get("review")} == set(notes)  # every ack is durable


def test_held_appends_land_after_the_turn_in_arrival_order_even_when_sent_first(make_registry, store):
    registry = make_registry()
    main, review, other = registry.session("t2"), registry.review("t2"), registry.session("t2")

    async def scenario():
        async with main.turn() as handle:
            assert handle is main
            await main.append_async("user", "ask")
            note = asyncio.create_task(review.append_async("assistant", "review note"))
            await asyncio.sleep(0)  # the note's request is in the mailbox now
            event = asyncio.create_task(other.append_async("user", "other handle's event"))
            await asyncio.sleep(0)
            await main.append_async("assistant", "answer")
            assert not note.done() and not event.done()
        return await note, await event

    note, event = asyncio.run(scenario())
    assert contents(store.transcript("t2")) == ["ask", "answer", "review note", "other handle's event"]
    assert (note.content, event.content) == ("review note", "other handle's event")


# -- re-entrancy, other handles, exceptions -------------------------------------------------


def test_nested_turns_of_one_handle_join_and_the_outer_exit_closes(make_registry, store):
    registry = make_registry()
    main, review = registry.session("t3"), registry.review("t3")

    async def scenario():
        async with main.turn():
            async with main.turn():
                await main.append_async("user", "ask")
                note = asyncio.create_task(review.append_async("assistant", "note"))
                await asyncio.sleep(0)
            await main.append_async("assistant", "after the inner exit")  # still inside
            assert not note.done()
        await note

    asyncio.run(scenario())
    assert contents(store.transcript("t3")) == ["ask", "after the inner exit", "note"]


def test_the_same_handle_from_another_thread_joins_the_open_turn(make_registry, store):
    main = make_registry(ask_timeout_s=5).session("t4")
    with main.turn():
        main.append("user", "from thread 1")

        def other_thread():
            with main.turn():  # would wait for thread 1's turn (which waits for us) if it did not join
                return main.append("assistant", "from thread 2")

        result_of(*run_in_thread(other_thread), timeout=10)
    assert contents(store.transcript("t4")) == ["from thread 1", "from thread 2"]


def test_another_handles_turn_waits_for_the_open_one(make_registry, store):
    registry = make_registry()
    first, second = registry.session("t5"), registry.session("t5")

    async def scenario():
        entered = asyncio.Event()

        async def second_turn():
            async with second.turn():
                entered.set()
                await second.append_async("user", "second ask")
                await second.append_async("assistant", "second answer")

        async with first.turn():
            await first.append_async("user", "first ask")
            other = asyncio.create_task(second_turn())
            with pytest.raises(asyncio.TimeoutError):  # it waits for our turn to close
                await asyncio.wait_for(entered.wait(), 0.3)
            await first.append_async("assistant", "first answer")
        await other

    asyncio.run(scenario())
    assert contents(store.transcript("t5")) == ["first ask", "first answer", "second ask", "second answer"]


def test_leaving_by_an_exception_closes_the_turn_and_keeps_its_messages(make_registry, store):
    registry = make_registry(max_turn_s=30, ask_timeout_s=1)
    main, review = registry.session("t6"), registry.review("t6")
    with pytest.raises(RuntimeError, match="tool crashed"):
        with main.turn():
            main.append("user", "ask")
            raise RuntimeError("tool crashed")
    started = time.monotonic()
    review.append("assistant", "note")  # held for max_turn_s if the turn were still open
    assert time.monotonic() - started < 10
    assert contents(store.transcript("t6")) == ["ask", "note"]


# -- max_turn_s, withdrawal, eviction, close -----------------------------------------------


def test_a_forgotten_turn_is_closed_after_max_turn_s(make_registry, store, caplog):
    registry = make_registry(max_turn_s=0.3)
    main, review = registry.session("t7"), registry.review("t7")
    caplog.set_level(logging.WARNING, logger="session_actors")
    started = time.monotonic()
    with main.turn():
        main.append("user", "ask")
        note = review.append("assistant", "held note")  # waits for the actor to close the turn
        assert time.monotonic() - started >= 0.3
        main.append("assistant", "late answer")  # the turn is over: lands after the note
    # the late exit was a no-op (no error); a new turn works
    with main.turn():
        main.append("user", "next ask")
    assert note.content == "held note"
    assert contents(store.transcript("t7")) == ["ask", "held note", "late answer", "next ask"]
    assert any("closed by the actor" in r.getMessage() for r in caplog.records)


def test_a_held_call_whose_caller_gave_up_is_withdrawn_never_applied(make_registry, store):
    # held wait = max_turn_s + ask_timeout_s = 3.2 s; the second turn opens at >= 1.5 s
    # and is closed by the actor at >= 4.5 s: the note's caller gives up first
    registry = make_registry(max_turn_s=3.0, ask_timeout_s=0.2)
    first, second, review = registry.session("t8"), registry.session("t8"), registry.review("t8")
    second_open, release_second = threading.Event(), threading.Event()

    def second_turn():
        with second.turn():
            second_open.set()
            assert release_second.wait(20)
            second.append("user", "second turn")

    with first.turn():
        first.append("user", "first turn")
        turn_thread, turn_box = run_in_thread(second_turn)  # waits behind our turn
        note_thread, note_box = run_in_thread(lambda: review.append("assistant", "withdrawn"))
        time.sleep(1.5)  # elapsed time, not ordering: the second turn opens well after the note
    assert second_open.wait(10)
    with pytest.raises(AskTimeoutError):
        result_of(note_thread, note_box, timeout=10)  # gave up while held behind the second turn
    release_second.set()
    result_of(turn_thread, turn_box)
    review.append("assistant", "retried")
    assert contents(store.transcript("t8")) == ["first turn", "second turn", "retried"]


def test_an_actor_with_an_open_turn_is_never_evicted(make_registry, store):
    registry = make_registry(max_resident=1)
    main = registry.session("t9")
    with main.turn():
        main.append("user", "ask")
        registry.session("t9-other")  # over capacity: t9 is least recently used but in a turn
        assert registry.stats()["resident"] == 2
        assert registry.stats()["actors_stopped"] == 0
        main.append("assistant", "answer")
    registry.session("t9-third")  # now one of them may go
    assert registry.stats()["actors_stopped"] >= 1
    assert contents(store.transcript("t9")) == ["ask", "answer"]


def test_an_idle_actor_with_an_open_turn_is_not_stopped(make_registry, store):
    registry = make_registry(idle_timeout_s=0.05)
    main = registry.session("t14")
    with main.turn():
        main.append("user", "ask")
        time.sleep(0.5)  # elapsed time: ten idle timeouts with no traffic
        assert registry.stats()["actors_stopped"] == 0
        main.append("assistant", "answer")  # the same actor: the turn is still open
    wait_until(lambda: registry.stats()["actors_stopped"] == 1, what="the idle eviction")
    assert contents(store.transcript("t14")) == ["ask", "answer"]


def test_close_applies_held_calls_before_stopping(make_registry, store):
    registry = make_registry()
    main, review = registry.session("t10"), registry.review("t10")

    async def scenario():
        await main.turn().__aenter__()  # a turn nobody closes
        await main.append_async("user", "ask")
        note = asyncio.create_task(review.append_async("assistant", "held at close"))
        await asyncio.sleep(0)
        # no drain: the turn is abandoned on purpose, and what close() applies at once is under test
        await asyncio.to_thread(registry.close, drain_s=0)
        return await note

    note = asyncio.run(scenario())
    assert note.content == "held at close"
    assert contents(store.transcript("t10")) == ["ask", "held at close"]


# -- compaction never splits an open turn ----------------------------------------------------


def test_compaction_during_a_turn_snapshots_before_it_and_carries_it_whole(make_registry, store):
    gated = GatedCompressor()
    registry = make_registry(gated)
    main, review = registry.session("t11"), registry.review("t11")
    main.append(conversation(6))
    before_turn = store.transcript("t11")[-1]
    turn = tool_turn("open")
    with main.turn():
        main.append(turn[:2])  # ask and tool call are in the store before the snapshot
        thread, box = run_in_thread(main.compress)
        assert gated.wait_started(10)
        note_thread, note_box = run_in_thread(lambda: review.append("assistant", "review note"))
        main.append(turn[2])  # the tool result comes while the compressor runs
        gated.release()
        outcome = result_of(thread, box)
        main.append(turn[3])  # the answer comes after the commit
    result_of(note_thread, note_box)

    assert contents(gated.inputs[0]) == contents(conversation(6))  # no half turn summarized
    assert outcome.status is S.COMPACTED
    assert outcome.record.watermark == before_turn.seq
    live = store.transcript("t11")
    assert contents(live[-5:]) == contents(turn) + ["review note"]
    assert_turns_contiguous(live[:-1], 1)


def test_a_trailing_tool_run_with_unanswered_calls_stays_out_of_the_snapshot(make_registry, store):
    gated = GatedCompressor()
    gated.release()
    main = make_registry(gated).session("t12")
    main.append(conversation(4))
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in range(2)]
    main.append([Message("assistant", "", tool_calls=calls), Message("tool", "r0", tool_call_id="c0")])
    outcome = main.compress()
    assert contents(gated.inputs[0]) == contents(conversation(4))
    assert outcome.status is S.COMPACTED
    assert outcome.record.watermark == store.archive("t12")[3].seq
    live = store.transcript("t12")
    assert [m.role for m in live[-2:]] == ["assistant", "tool"]
    assert live[-2].tool_calls == calls


def test_a_turn_survives_two_rotations_while_open(make_registry, store):
    gated = GatedCompressor()
    gated.release()
    main = make_registry(gated, mode="rotate").session("t13")
    main.append(conversation(6))
    turn = tool_turn("open")
    with main.turn():
        main.append(turn[:2])
        first = main.compress()  # the turn's messages are copied into the child with new seqs
        main.append(turn[2])
        second = main.compress()  # the child's snapshot still stops before the turn
        main.append(turn[3])
    assert first.status is S.ROTATED and second.status is S.ROTATED
    for snapshot in gated.inputs:
        assert not any(m.meta.get("turn") == "open" for m in snapshot)
    live = store.transcript(main.session_id)
    assert contents(live[-4:]) == contents(turn)
    assert_turns_contiguous(live, 1)


# -- a caller that gives up (review 9) -------------------------------------------------------


def test_a_turn_whose_opener_was_cancelled_after_the_actor_opened_it_is_closed(make_registry, store):
    """`async with handle.turn()` under a gateway's request timeout: the task is cancelled
    after the actor opened the turn but before `__aenter__` returned. Nobody will exit
    that turn; it must not hold the review path for ``max_turn_s``."""
    registry = make_registry(max_turn_s=60)
    main, review = registry.session("t13"), registry.review("t13")

    async def scenario():
        opening = asyncio.create_task(main.turn().__aenter__())
        await asyncio.sleep(0)  # OpenTurn is in the mailbox
        main.transcript()  # blocks the loop until the actor served OpenTurn (mailbox order)
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        started = time.monotonic()
        note = await review.append_async("assistant", "review note")
        return note, time.monotonic() - started

    note, waited = asyncio.run(scenario())
    assert note.content == "review note"
    assert waited < 20, f"the review append waited {waited:.1f}s for an abandoned turn"


def test_close_applying_held_calls_starts_no_compaction(make_registry, store):
    """`registry.close()` applies held calls in the actor's stop; one that pushes the
    session over ``max_tokens`` must not start an attempt nobody will abort (its
    lease and compressor thread would outlive the registry)."""
    compressor = GatedCompressor(gate_timeout_s=20)
    registry = make_registry(compressor, max_tokens=200)
    main, review = registry.session("t14"), registry.review("t14")

    async def scenario():
        await main.turn().__aenter__()  # a turn nobody closes
        await main.append_async("user", "ask")
        note = asyncio.create_task(review.append_async("assistant", "held " * 400))
        await asyncio.sleep(0)
        # no drain: the turn is abandoned on purpose, and what close() applies at once is under test
        await asyncio.to_thread(registry.close, drain_s=0)
        return await note

    note = asyncio.run(scenario())
    assert note.content.startswith("held")
    assert store.current_lease("t14") is None
    assert not compressor.started.is_set()


def test_close_applies_a_held_append_queued_behind_another_handles_held_turn(make_registry, store):
    """`registry.close()` applies held calls: a held `turn()` of another handle opens a
    turn during the stop, and the append held behind it must still be applied then,
    not left to its caller's timeout."""
    registry = make_registry(max_turn_s=60)
    main, other, review = registry.session("t15"), registry.session("t15"), registry.review("t15")

    async def scenario():
        await main.turn().__aenter__()  # a turn nobody closes
        await main.append_async("user", "ask")
        opening = asyncio.create_task(other.turn().__aenter__())
        await asyncio.sleep(0)  # the other handle's OpenTurn is held
        note = asyncio.create_task(review.append_async("assistant", "held at close"))
        await asyncio.sleep(0)  # held behind both
        started = time.monotonic()
        # no drain: the turn is abandoned on purpose, and what close() applies at once is under test
        await asyncio.to_thread(registry.close, drain_s=0)
        await opening
        return await note, time.monotonic() - started

    note, waited = asyncio.run(scenario())
    assert note.content == "held at close"
    assert waited < 20, f"the held append was answered after {waited:.1f}s"
    assert contents(store.transcript("t15")) == ["ask", "held at close"]


def test_a_redirected_append_whose_caller_gave_up_is_never_applied(make_registry, store):
    """A handle's session was rotated by another process and the successor id already has
    its own actor here: the append is claimed, redirected and forwarded to that actor,
    which holds it behind an open turn. Its caller gives up (task cancelled): it must
    never be applied after the turn closes (a retry would duplicate it)."""
    compressor = GatedCompressor()
    compressor.release()
    here, elsewhere = make_registry(compressor), make_registry(compressor)
    old = here.session("t16")
    old.append([Message("user", "hello"), Message("assistant", "hi")])
    child = elsewhere.session("t16").compress(mode="rotate").session_id
    successor = here.session(child)  # a second actor here, for the live id

    async def scenario():
        turn = successor.turn()
        await turn.__aenter__()
        await successor.append_async("user", "in the turn")
        late = asyncio.create_task(old.append_async("assistant", "gave up"))
        await asyncio.to_thread(wait_until, lambda: old.session_id == child, 10, "the redirect")
        late.cancel()  # claimed by the old actor already: it can only be withdrawn now
        with pytest.raises(asyncio.CancelledError):
            await late
        await turn.__aexit__(None, None, None)
        await successor.append_async("assistant", "after the turn")

    asyncio.run(scenario())
    here.close()
    assert contents(store.transcript(child))[-2:] == ["in the turn", "after the turn"]


def test_a_compaction_never_snapshots_into_another_processes_open_turn(make_registry, store):
    from actors import HeadTailCompressor
    from protocol import CompressionStatus, Message

    store.create_session("x")
    store.append("x", [Message("user", f"old {i}") for i in range(8)])
    other = store.open_turn("x", "another-process", 30)  # that process's turn, mid-way
    store.append("x", [Message("user", "their ask"), Message("assistant", "their half answer")], turn=other)
    registry = make_registry(compressor=HeadTailCompressor(keep_last=1))
    outcome = registry.session("x").compress(force=True, mode="rotate")
    assert outcome.status is CompressionStatus.ROTATED, outcome
    child = outcome.record.child_session_id
    live = [m.content for m in store.transcript(child)]
    assert live[-2:] == ["their ask", "their half answer"]  # the turn travelled whole in the tail
    assert "their ask" not in [m.content for m in store.archive("x") if m.state == "compacted"]
    store.append(child, Message("assistant", "the rest of their answer"), turn=other)  # its lease moved too
    assert store.close_turn(other)
