"""The compaction flow of one session, step by step (DESIGN section 5).

Real stores (SQLite file, PostgreSQL schema), real threads; faults only through
`FaultyStore` hooks. Items 3-11 and 13 of issue 3.
"""

from __future__ import annotations

import threading
import time

import pytest

from actors.testing import GatedCompressor, ScriptedCompressor, summary_only
from protocol import (
    Compress,
    CompressionDisabledError,
    CompressionStatus,
    Cooldown,
    InvalidArgumentError,
    InvalidMessageError,
    Message,
)

from .helpers import Blocker, conversation, wait_until

S = CompressionStatus
pytestmark = pytest.mark.timeout(60)


def run_in_thread(fn):
    """Start ``fn`` in a thread; returns (thread, box) where box["value"|"error"] is set."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # surfaced by the test through the box
            box["error"] = exc

    thread = threading.Thread(target=target, name="test-caller")
    thread.start()
    return thread, box


def result_of(thread, box, timeout=20.0):
    thread.join(timeout)
    assert not thread.is_alive(), "caller thread did not finish"
    if "error" in box:
        raise box["error"]
    return box["value"]


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


# -- 4: the durable transcript is what gets compressed ------------------------------------

def test_messages_from_another_registry_before_the_lease_are_compressed(make_registry):
    scripted = ScriptedCompressor(summary_only)
    ours = make_registry(scripted).session("s4")
    ours.append(conversation(4))
    theirs = make_registry().session("s4")
    theirs.append("assistant", "written by the other process")

    outcome = ours.compress()

    assert outcome.status is S.COMPACTED
    assert contents(scripted.inputs[0]) == [f"turn {i}" for i in range(4)] + [
        "written by the other process"]
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


# -- 9: failures arm the cooldown; force bypasses and restores ---------------------------

def test_compressor_failure_arms_cooldown_and_force_clears_it(make_registry, store):
    scripted = ScriptedCompressor(RuntimeError("model exploded"), summary_only)
    session = make_registry(scripted, cooldown_s=600).session("s9")
    session.append(conversation(6))

    failed = session.compress()
    assert failed.status is S.FAILED
    cooldown = store.cooldown("s9")
    assert cooldown is not None and cooldown.is_live(store.now())
    assert "model exploded" in (cooldown.error or "")
    assert store.current_lease("s9") is None

    skipped = session.compress()
    assert (skipped.status, skipped.reason) == (S.SKIPPED, "cooldown")
    assert scripted.calls == 1

    forced = session.compress(force=True)
    assert forced.status is S.COMPACTED
    assert scripted.calls == 2
    assert store.cooldown("s9") is None


@pytest.mark.parametrize("offset", [-10.0, 120.0])
def test_interrupted_forced_attempt_restores_exact_cooldown_row(make_registry, store, offset):
    gated = GatedCompressor()
    session = make_registry(gated).session("s9f")
    session.append(conversation(6))
    store.restore_cooldown("s9f", Cooldown("s9f", store.now() + offset, "earlier failure"))
    before = store.cooldown("s9f")

    thread, box = run_in_thread(lambda: session.compress(force=True))
    assert gated.wait_started(10)
    assert store.cooldown("s9f") is None  # force cleared it under the lease
    assert session.interrupt() is True
    outcome = result_of(thread, box)

    assert outcome.status is S.CANCELLED
    assert store.cooldown("s9f") == before
    assert store.current_lease("s9f") is None


def test_timeout_cancels_and_arms_cooldown(make_registry, store):
    gated = GatedCompressor()
    session = make_registry(gated, max_compaction_s=0.3, cooldown_s=50).session("s9t")
    session.append(conversation(6))
    outcome = session.compress()
    assert (outcome.status, outcome.reason) == (S.CANCELLED, "timeout")
    cooldown = store.cooldown("s9t")
    assert cooldown is not None and cooldown.error == "timeout" and cooldown.is_live(store.now())
    assert store.current_lease("s9t") is None and store.compactions("s9t") == []


# -- 10: the lease is lost while the compressor runs ---------------------------------------

def _fail_renew(real, *args, **kwargs):
    raise OSError("renew failed (injected)")


def test_renewals_failing_self_fence_to_lease_lost(make_registry, store):
    gated = GatedCompressor()
    registry = make_registry(gated, faulty=True, lease_ttl_s=0.6)
    registry.store.hooks["renew_lease"] = _fail_renew
    session = registry.session("s10")
    session.append(conversation(6))
    before = contents(store.transcript("s10"))

    thread, box = run_in_thread(session.compress)
    outcome = result_of(thread, box, timeout=10)  # the keeper fences itself at ttl - ttl/10

    assert outcome.status is S.LEASE_LOST
    assert contents(store.transcript("s10")) == before
    assert store.compactions("s10") == [] and store.get_session("s10").epoch == 0
    wait_until(lambda: store.acquire_lease("s10", "another-host", 30) is not None,
               what="lease to expire and be taken over")
    gated.release()


def test_renew_reporting_takeover_ends_lease_lost_without_writing(make_registry, store):
    gated = GatedCompressor()
    registry = make_registry(gated, faulty=True, lease_ttl_s=0.6)
    taken = threading.Event()

    def renew_after_takeover(real, lease, ttl_s):
        assert taken.wait(10)
        return real(lease, ttl_s)

    registry.store.hooks["renew_lease"] = renew_after_takeover
    session = registry.session("s10b")
    session.append(conversation(6))
    thread, box = run_in_thread(session.compress)
    assert gated.wait_started(10)
    # the holder is paused (its renew blocked); the lease expires and another host takes it
    wait_until(lambda: store.acquire_lease("s10b", "another-host", 30) is not None,
               what="takeover")
    taken.set()
    gated.release()
    outcome = result_of(thread, box)

    assert outcome.status is S.LEASE_LOST
    assert store.compactions("s10b") == [] and store.get_session("s10b").epoch == 0
    assert store.current_lease("s10b").holder == "another-host"


# -- 11: the lease machinery failing fails closed -----------------------------------------

@pytest.mark.parametrize("after_real_call", [False, True])
def test_lease_acquisition_raising_skips_without_leaking(make_registry, store, after_real_call):
    scripted = ScriptedCompressor(summary_only)
    registry = make_registry(scripted, faulty=True)

    def broken_acquire(real, *args, **kwargs):
        if after_real_call:
            real(*args, **kwargs)  # the row was written, then the connection "dropped"
        raise ConnectionError("lease table unreachable (injected)")

    registry.store.hooks["acquire_lease"] = broken_acquire
    session = registry.session("s11")
    session.append(conversation(6))

    outcome = session.compress()

    assert (outcome.status, outcome.reason) == (S.SKIPPED, "lease_error")
    assert scripted.calls == 0
    assert store.current_lease("s11") is None


def test_store_error_before_compressor_is_raised_and_lease_released(make_registry, store):
    scripted = ScriptedCompressor(summary_only)
    registry = make_registry(scripted, faulty=True)

    def broken_transcript(real, *args, **kwargs):
        raise OSError("disk on fire (injected)")

    session = registry.session("s11b")
    session.append(conversation(6))
    registry.store.hooks["transcript"] = broken_transcript
    with pytest.raises(OSError, match="disk on fire"):
        session.compress()
    assert scripted.calls == 0
    assert store.current_lease("s11b") is None


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


# -- interrupt while the actor thread is still preparing (slow store read under the lease) --

def test_interrupt_while_preparing_is_prompt_and_frees_the_lease(make_registry, store):
    scripted = ScriptedCompressor(summary_only)
    registry = make_registry(scripted, faulty=True)
    session = registry.session("prep")
    session.append(conversation(6))
    blocker = Blocker()
    registry.store.hooks["transcript"] = blocker  # the durable read of step 5 hangs
    thread, box = run_in_thread(session.compress)
    assert blocker.entered.wait(10)
    assert store.current_lease("prep") is not None

    started = time.monotonic()
    assert session.interrupt() is True
    assert time.monotonic() - started < 1.0
    assert store.current_lease("prep") is None
    blocker.release.set()

    outcome = result_of(thread, box)
    assert (outcome.status, outcome.reason) == (S.CANCELLED, "interrupted")
    assert scripted.calls == 0
    assert store.compactions("prep") == [] and store.current_lease("prep") is None


def test_commit_error_fails_and_arms_cooldown(make_registry, store):
    registry = make_registry(ScriptedCompressor(summary_only), faulty=True, cooldown_s=60)

    def broken_commit(real, *args, **kwargs):
        raise OSError("commit exploded (injected)")

    registry.store.hooks["commit_compaction"] = broken_commit
    session = registry.session("commit-err")
    session.append(conversation(6))
    outcome = session.compress()
    assert (outcome.status, outcome.reason) == (S.FAILED, "commit_error")
    assert "commit exploded" in outcome.error
    assert store.cooldown("commit-err").is_live(store.now())
    assert store.compactions("commit-err") == [] and store.current_lease("commit-err") is None


def test_forced_timeout_restores_snapshot_then_arms_cooldown(make_registry, store):
    gated = GatedCompressor()
    session = make_registry(gated, max_compaction_s=0.3, cooldown_s=30).session("force-timeout")
    session.append(conversation(6))
    earlier = Cooldown("force-timeout", store.now() + 3600, "much later failure")
    store.restore_cooldown("force-timeout", earlier)
    outcome = session.compress(force=True)
    assert (outcome.status, outcome.reason) == (S.CANCELLED, "timeout")
    # merge-max: the restored, later deadline wins and keeps its error
    after = store.cooldown("force-timeout")
    assert after.until == pytest.approx(earlier.until) and after.error == "much later failure"
