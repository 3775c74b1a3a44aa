"""The compaction flow of one session, step by step (docs/architecture.md, "The compaction path").

Real stores (SQLite file, PostgreSQL schema), real threads; faults only through
`FaultyStore` hooks. Items 3-8 and 13 of issue 3 (failures: test_failures.py).
"""

from __future__ import annotations

import time

import pytest

from actors.testing import GatedCompressor, ScriptedCompressor, summary_only
from protocol import (
    CompressionDisabledError,
    CompressionStatus,
    InvalidArgumentError,
    InvalidMessageError,
    Message,
)
from protocol._commands import Compress, Interrupt

from .helpers import Blocker, conversation, result_of, run_in_thread

S = CompressionStatus
pytestmark = pytest.mark.timeout(60)


def contents(messages):
    return [m.content for m in messages]


# -- 3: appends during a running compaction ---------------------------------------------


def test_appends_during_compaction_are_prompt_and_land_after_compacted_set(make_registry, store):
    gated = GatedCompressor()
    session = make_registry(gated).session("s3")
    session.append(conversation(6))
    thread, box = run_in_thread(session.compress)
    assert gated.wait_started(10)

    during = []
    for i in range(10):
        started = time.monotonic()
        during.append(session.append("user" if i % 2 else "assistant", f"during {i}"))
        assert time.monotonic() - started < 2.0, "an append waited for the compressor"
    gated.release()
    outcome = result_of(thread, box)

    assert outcome.status is S.COMPACTED
    assert outcome.record.tail_count == 10
    live = store.transcript("s3")
    assert contents(live[-10:]) == [f"during {i}" for i in range(10)]
    assert [m.seq for m in live] == sorted(m.seq for m in live)
    assert len(live) == outcome.messages_after
    # the originals are archived, none lost
    archived = contents(store.archive("s3"))
    assert all(f"turn {i}" in archived for i in range(6))
    assert all(f"during {i}" in archived for i in range(10))


def test_a_long_tail_appended_during_compaction_is_checked_and_carried_whole(make_registry, store):
    """More messages arrive while the compressor runs than the first read of the
    tail takes: the check reads further back until it is past the snapshot."""
    gated = GatedCompressor()
    session = make_registry(gated).session("long-tail")
    session.append(conversation(6))
    thread, box = run_in_thread(session.compress)
    assert gated.wait_started(10)
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    session.append([Message("assistant", "", tool_calls=calls), Message("tool", "r1", tool_call_id="c1")])
    session.append(conversation(298, start=100))
    gated.release()
    outcome = result_of(thread, box)
    assert outcome.status is S.COMPACTED, outcome
    assert outcome.record.tail_count == 300
    live = store.transcript("long-tail")
    assert [m.role for m in live[-300:-298]] == ["assistant", "tool"]
    assert contents(live[-298:]) == [f"turn {i}" for i in range(100, 398)]


# -- 4: the durable transcript is what gets compressed ------------------------------------


def test_messages_from_another_registry_before_the_lease_are_compressed(make_registry):
    scripted = ScriptedCompressor(summary_only)
    ours = make_registry(scripted).session("s4")
    ours.append(conversation(4))
    theirs = make_registry().session("s4")
    theirs.append("assistant", "written by the other process")

    outcome = ours.compress()

    assert outcome.status is S.COMPACTED
    assert contents(scripted.inputs[0]) == [f"turn {i}" for i in range(4)] + ["written by the other process"]
    assert outcome.messages_before == 5


# -- 5: a stale handle follows a rotation done elsewhere ---------------------------------


def test_stale_handle_on_rotated_parent_appends_to_child_and_adopts(make_registry, store):
    ours_compressor = ScriptedCompressor(summary_only)
    stale = make_registry(ours_compressor).session("p5")
    stale.append(conversation(4))
    other = make_registry(ScriptedCompressor(summary_only), mode="rotate").session("p5")
    rotated = other.compress()
    assert rotated.status is S.ROTATED
    child = rotated.session_id
    assert child != "p5"

    late = stale.append("user", "late turn")
    assert late.session_id == child
    assert stale.session_id == child
    assert store.transcript(child)[-1].content == "late turn"
    assert store.transcript("p5") == []

    adopted = stale.compress()
    assert adopted.status is S.ADOPTED
    assert adopted.session_id == child
    assert adopted.previous_session_id == "p5"
    assert ours_compressor.calls == 0
    assert store.current_lease("p5") is None and store.current_lease(child) is None
    # the baseline moved with the adoption: the next compress compacts the child
    again = stale.compress()
    assert again.status is S.COMPACTED and again.session_id == child
    assert ours_compressor.calls == 1


# -- 6: interrupt before the commit ------------------------------------------------------


def test_interrupt_before_commit_cancels_and_next_compress_commits(make_registry, store):
    gated = GatedCompressor()
    session = make_registry(gated).session("s6")
    session.append(conversation(6))
    before = contents(store.transcript("s6"))
    thread, box = run_in_thread(session.compress)
    assert gated.wait_started(10)

    assert session.interrupt() is True
    assert store.current_lease("s6") is None  # free when interrupt() returns
    outcome = result_of(thread, box)

    assert outcome.status is S.CANCELLED and outcome.reason == "interrupted"
    assert contents(store.transcript("s6")) == before
    assert store.get_session("s6").epoch == 0
    assert store.compactions("s6") == []
    assert session.interrupt() is False  # nothing in flight any more
    session.append("user", "still writable")

    gated.release()
    assert session.compress().status is S.COMPACTED
    assert store.get_session("s6").epoch == 1


# -- 7: interrupt after admission waits for the commit -----------------------------------


def test_interrupt_after_admission_waits_and_returns_false(make_registry, store):
    registry = make_registry(ScriptedCompressor(summary_only), faulty=True)
    blocker = Blocker()
    registry.store.hooks["commit_compaction"] = blocker
    session = registry.session("s7")
    session.append(conversation(6))
    compress_thread, compress_box = run_in_thread(session.compress)
    assert blocker.entered.wait(10)

    interrupt_thread, interrupt_box = run_in_thread(session.interrupt)
    interrupt_thread.join(0.3)
    assert interrupt_thread.is_alive(), "interrupt returned while a commit was admitted"
    blocker.release.set()

    assert result_of(interrupt_thread, interrupt_box) is False
    outcome = result_of(compress_thread, compress_box)
    assert outcome.status is S.COMPACTED
    assert len(store.compactions("s7")) == 1
    assert store.current_lease("s7") is None


# -- 8: an equal result writes nothing ---------------------------------------------------


@pytest.mark.parametrize("mode", ["in_place", "rotate"])
def test_equal_transcript_is_unchanged_and_writes_nothing(make_registry, store, mode):
    echo = ScriptedCompressor(lambda messages: [m.as_message() for m in messages])
    session = make_registry(echo, mode=mode).session("s8")
    session.append(conversation(6))

    outcome = session.compress()

    assert outcome.status is S.UNCHANGED
    assert outcome.record is None
    assert store.compactions("s8") == []
    assert store.children("s8") == []
    info = store.get_session("s8")
    assert info.epoch == 0 and info.ended_at is None
    assert store.current_lease("s8") is None
    assert session.session_id == "s8"


def test_empty_result_is_skipped(make_registry, store):
    session = make_registry(ScriptedCompressor([])).session("s8e")
    session.append(conversation(4))
    outcome = session.compress()
    assert (outcome.status, outcome.reason) == (S.SKIPPED, "empty_result")
    assert store.compactions("s8e") == [] and store.current_lease("s8e") is None


def test_nothing_to_do_and_disabled(make_registry, store):
    session = make_registry(ScriptedCompressor(summary_only)).session("s8n")
    session.append("user", "only one")
    outcome = session.compress()
    assert (outcome.status, outcome.reason) == (S.SKIPPED, "nothing_to_do")
    disabled = make_registry(None).session("s8n")
    assert (disabled.compress().status, disabled.compress().reason) == (S.SKIPPED, "disabled")
    assert store.current_lease("s8n") is None


# -- 13: review handles -----------------------------------------------------------------


def test_review_handle_appends_and_reads_but_never_compresses(make_registry, store):
    registry = make_registry(ScriptedCompressor(summary_only))
    main = registry.session("s13")
    review = registry.review("s13")
    assert not hasattr(review, "compress")
    assert not hasattr(review, "compress_async")

    review.append("assistant", "review note")
    main.append("user", "main turn")
    assert contents(review.transcript()) == ["review note", "main turn"]
    with pytest.raises(CompressionDisabledError):
        review.ask(Compress())
    with pytest.raises(CompressionDisabledError):
        review.ask(Compress(origin="main"))  # the handle stamps its own origin
    assert store.compactions("s13") == [] and store.current_lease("s13") is None
    assert main.compress().status is S.COMPACTED


def test_interrupt_is_out_of_band_and_refused_to_review_handles(make_registry, store):
    gated = GatedCompressor()
    registry = make_registry(gated)
    main, review = registry.session("s13i"), registry.review("s13i")
    main.append(conversation(6))
    thread, box = run_in_thread(main.compress)
    assert gated.wait_started(10)
    with pytest.raises(CompressionDisabledError):
        review.ask(Interrupt())
    assert thread.is_alive() and store.current_lease("s13i") is not None  # still running
    assert main.ask(Interrupt()) is True  # not queued behind the attempt: answered now
    assert result_of(thread, box).status is S.CANCELLED


# -- bad input is typed and writes nothing ------------------------------------------------


def test_bad_input_is_rejected_before_anything_is_written(make_registry, store):
    session = make_registry(ScriptedCompressor(summary_only)).session("bad")
    with pytest.raises(InvalidMessageError):
        session.append("wizard", "hello")
    with pytest.raises(InvalidMessageError):
        session.append("user", "x", colour="red")
    with pytest.raises(InvalidArgumentError):
        session.compress(mode="sideways")
    with pytest.raises(InvalidArgumentError):
        session.append([])
    assert store.transcript("bad") == []
    one = session.append(Message("user", "ok"))
    assert one.seq == 1 and one.content == "ok"


def test_a_handle_reads_the_latest_messages_with_a_limit(make_registry, store):
    session = make_registry(ScriptedCompressor(summary_only)).session("latest")
    session.append([Message("user", f"m{i}") for i in range(8)])
    assert contents(session.transcript(limit=3)) == ["m5", "m6", "m7"]
    assert contents(session.transcript(limit=50)) == contents(store.transcript("latest"))
    for bad in (0, -2, True, "3"):
        with pytest.raises(InvalidArgumentError):
            session.transcript(limit=bad)
