"""The caller-runs append path: an append runs the actor's own append step on the
caller's thread when nothing could be overtaken or entered, and through the
mailbox otherwise. Raced here against compaction (both modes: rotation moves the
live id), interrupt, the commit itself, eviction and another handle's open turn.

The store wrapper only observes (which thread ran an append) or blocks a call to
hold the actor mid-message; every store underneath is real.
"""

from __future__ import annotations

import sys
import threading

import pytest

from actors.testing import GatedCompressor, ScriptedCompressor, summary_only
from protocol import SUMMARY_PREFIX, CompressionStatus, Message

from .helpers import Blocker, conversation, result_of, run_in_thread

pytestmark = pytest.mark.timeout(60)

WRITERS = 4
APPENDS = 30


def appending_threads(handle, tag: str, count: int = APPENDS, writers: int = WRITERS):
    """Writer threads appending ``tag-w-i`` in order; returns (threads, acks, errors)."""
    acks: dict[int, list[str]] = {w: [] for w in range(writers)}
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def write(w: int) -> None:
        try:
            start.wait(10)
            for i in range(count):
                acks[w].append(handle.append("user", f"{tag}-{w}-{i}").content)
        except BaseException as exc:  # asserted by the test
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    return threads, acks, errors


def joined(threads, errors) -> None:
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors


def assert_each_writer_in_order(contents: list[str], acks: dict[int, list[str]]) -> None:
    for sent in acks.values():
        assert len(sent) == APPENDS
        positions = [contents.index(c) for c in sent]  # every acknowledged message is live
        assert positions == sorted(positions)


def summary_end(contents: list[str]) -> int:
    """The index just past the compacted set (it ends with the summary here)."""
    marks = [i for i, c in enumerate(contents) if c.startswith(SUMMARY_PREFIX)]
    assert len(marks) == 1
    return marks[0] + 1


def append_threads(registry) -> list[threading.Thread]:
    """The threads the store's appends run on, from now on (a `FaultyStore` hook)."""
    seen: list[threading.Thread] = []

    def observe(real, *args, **kwargs):
        seen.append(threading.current_thread())
        return real(*args, **kwargs)

    registry.store.hooks["append"] = observe
    return seen


def test_an_idle_actor_lets_the_caller_run_its_append(make_registry):
    registry = make_registry(faulty=True)
    threads_seen = append_threads(registry)
    handle = registry.session("idle")
    handle.append("user", "one")
    handle.append("assistant", "two")
    assert threads_seen == [threading.current_thread()] * 2
    assert [m.content for m in handle.transcript()] == ["one", "two"]


def test_a_caller_answered_through_the_mailbox_finds_the_actor_free(make_registry):
    """The actor answers a message only once it has let the session go, so the next
    append of a caller answered through the mailbox (a read, opening a turn) runs on
    the caller's thread, every time (frequent GIL switches make the caller often wake
    before the actor thread has gone on)."""
    registry = make_registry(faulty=True)
    threads_seen = append_threads(registry)
    handle = registry.session("answered")
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the caller often wakes before the actor thread goes on
    try:
        for i in range(40):
            handle.transcript()  # through the mailbox
            handle.append("user", f"after a read {i}")
            with handle.turn():  # opening it goes through the mailbox too
                handle.append("assistant", f"in a turn {i}")
    finally:
        sys.setswitchinterval(interval)
    assert len(threads_seen) == 80
    assert set(threads_seen) == {threading.current_thread()}


def test_a_busy_actor_queues_appends_in_arrival_order(make_registry):
    """While the actor handles a message (here: a transcript read held in the store)
    appends go through the mailbox, and apply in the order they arrived."""
    registry = make_registry(faulty=True)
    handle = registry.session("busy")
    handle.append("user", "before")
    blocker = Blocker()
    registry.store.hooks["transcript"] = blocker
    reader, read_box = run_in_thread(handle.transcript)
    assert blocker.entered.wait(10)
    first, first_box = run_in_thread(lambda: handle.append("user", "first"))
    first.join(0.2)
    assert first.is_alive()  # not run on its thread: the actor is mid-message
    later = registry.review("busy")
    second, second_box = run_in_thread(lambda: later.append("assistant", "second"))
    blocker.release.set()
    result_of(reader, read_box)
    assert result_of(first, first_box).seq < result_of(second, second_box).seq
    assert [m.content for m in handle.transcript()] == ["before", "first", "second"]


def test_another_handles_open_turn_holds_appends_even_from_an_idle_actor(make_registry):
    registry = make_registry()
    main = registry.session("turns")
    review = registry.review("turns")
    with main.turn():
        main.append("user", "ask")
        held, held_box = run_in_thread(lambda: review.append("assistant", "review note"))
        held.join(0.3)
        assert held.is_alive()  # held behind the turn, not run on its caller's thread
        main.append("assistant", "answer")  # the owner's own appends still go through
        assert [m.content for m in main.transcript()] == ["ask", "answer"]
    assert result_of(held, held_box).content == "review note"
    assert [m.content for m in main.transcript()] == ["ask", "answer", "review note"]
    review.append("user", "after the turn")  # nothing held any more: runs at once
    assert main.transcript()[-1].content == "after the turn"


@pytest.mark.parametrize("mode", ["in_place", "rotate"])
def test_appends_racing_a_compaction_land_in_its_tail_in_order(make_registry, mode):
    gated = GatedCompressor()
    registry = make_registry(gated, mode=mode)
    handle = registry.session("compacting")
    handle.append(conversation(6))
    compressing, box = run_in_thread(handle.compress)
    assert gated.wait_started(10)
    threads, acks, errors = appending_threads(handle, "during")
    joined(threads, errors)  # every append acknowledged while the summary is in flight
    gated.release()
    outcome = result_of(compressing, box)
    assert outcome.status is (CompressionStatus.ROTATED if mode == "rotate" else CompressionStatus.COMPACTED)
    assert handle.session_id == outcome.session_id
    after = handle.append("user", "after the commit")
    assert after.session_id == outcome.session_id  # rotation moved the live id
    contents = [m.content for m in handle.transcript()]
    tail = contents[summary_end(contents) :]  # the compacted set, then the tail
    assert_each_writer_in_order(tail, acks)
    assert len(tail) == WRITERS * APPENDS + 1 and tail[-1] == "after the commit"


def test_appends_racing_an_interrupt_are_all_kept(make_registry, store):
    gated = GatedCompressor()
    registry = make_registry(gated)
    handle = registry.session("interrupted")
    handle.append(conversation(6))
    compressing, box = run_in_thread(handle.compress)
    assert gated.wait_started(10)
    threads, acks, errors = appending_threads(handle, "racing")
    assert handle.interrupt() is True
    joined(threads, errors)
    outcome = result_of(compressing, box)
    assert outcome.status is CompressionStatus.CANCELLED
    contents = [m.content for m in store.transcript("interrupted")]
    assert contents[:6] == [m.content for m in conversation(6)]
    assert_each_writer_in_order(contents, acks)
    assert len(contents) == 6 + WRITERS * APPENDS
    assert store.current_lease("interrupted") is None


def test_an_append_never_runs_inside_the_actors_commit(make_registry):
    """The commit runs on the actor thread holding the exclusive lock: an append
    arriving meanwhile waits for it (and lands after the compacted set)."""
    gated = GatedCompressor()
    registry = make_registry(gated, faulty=True)
    handle = registry.session("commit")
    handle.append(conversation(6))
    blocker = Blocker()
    registry.store.hooks["commit_compaction"] = blocker
    compressing, box = run_in_thread(handle.compress)
    assert gated.wait_started(10)
    gated.release()
    assert blocker.entered.wait(10)  # the actor is inside its commit
    late, late_box = run_in_thread(lambda: handle.append("user", "late"))
    late.join(0.3)
    assert late.is_alive()
    blocker.release.set()
    assert result_of(compressing, box).status is CompressionStatus.COMPACTED
    assert result_of(late, late_box).content == "late"
    contents = [m.content for m in handle.transcript()]
    assert summary_end(contents) == len(contents) - 1 and contents[-1] == "late"
    assert "late" not in [m.content for m in handle.archive()]  # not carried: written after


def test_appends_racing_eviction_lose_nothing(make_registry, store):
    """Two sessions, one resident actor: every start evicts the other session's
    actor, while both are appended to from several threads each."""
    registry = make_registry(max_resident=1)
    handles = {sid: registry.session(sid) for sid in ("left", "right")}
    runs = {sid: appending_threads(handles[sid], sid, writers=3) for sid in handles}
    for threads, _, errors in runs.values():
        joined(threads, errors)
    assert registry.stats()["actors_stopped"] >= 1
    for sid, (_, acks, _) in runs.items():
        contents = [m.content for m in store.transcript(sid)]
        assert len(contents) == 3 * APPENDS
        assert_each_writer_in_order(contents, acks)


def test_a_list_append_runs_here_as_one_transaction(make_registry):
    registry = make_registry()
    handle = registry.session("batch")
    stored = handle.append([Message("user", "q"), Message("assistant", "a")])
    assert [m.seq for m in stored] == [1, 2]


def test_an_append_after_a_rotation_elsewhere_follows_the_successor_on_the_callers_thread(make_registry):
    """Another registry (another process) rotated the session: the caller's append
    meets it ended, follows to the child and lands there, without the mailbox."""
    registry = make_registry(faulty=True)
    handle = registry.session("moved")
    handle.append(conversation(6))
    threads_seen = append_threads(registry)
    elsewhere = make_registry(ScriptedCompressor(summary_only), mode="rotate")
    outcome = elsewhere.session("moved").compress(force=True)
    assert outcome.status is CompressionStatus.ROTATED
    child = outcome.session_id
    stored = handle.append("user", "after the move")
    assert stored.session_id == child and handle.session_id == child
    # the refused try on the ended parent, then the one on the child: both here
    assert threads_seen == [threading.current_thread()] * 2
    assert handle.transcript()[-1].content == "after the move"
    handle.append("assistant", "and on")  # straight to the child now
    assert len(threads_seen) == 3 and [m.content for m in handle.transcript()][-2:] == ["after the move", "and on"]
