"""Failure paths of the compaction flow: cooldowns, forced attempts, timeouts, lost
leases, lease errors, store and lineage errors (items 9, 10, 11 of issue 3)."""

from __future__ import annotations

import threading
import time

import pytest

from actors.testing import GatedCompressor, ScriptedCompressor, summary_only
from protocol import CompressionStatus, Cooldown, LineageForkedError, SessionEndedError

from .helpers import Blocker, conversation, result_of, run_in_thread, wait_until

S = CompressionStatus
pytestmark = pytest.mark.timeout(60)


def contents(messages):
    return [m.content for m in messages]


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
    wait_until(
        lambda: store.acquire_lease("s10", "another-host", 30) is not None, what="lease to expire and be taken over"
    )
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
    wait_until(lambda: store.acquire_lease("s10b", "another-host", 30) is not None, what="takeover")
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
    # the outcome is delivered by the interrupt, not when the actor thread gets free
    thread.join(10)
    assert not thread.is_alive() and not blocker.release.is_set()
    outcome = result_of(thread, box)
    assert (outcome.status, outcome.reason) == (S.CANCELLED, "interrupted")
    blocker.release.set()

    assert scripted.calls == 0
    assert store.compactions("prep") == [] and store.current_lease("prep") is None
    assert session.compress().status is S.COMPACTED  # the actor thread came back clean


def test_forced_interrupt_while_preparing_restores_the_cooldown_before_returning(make_registry, store):
    scripted = ScriptedCompressor(summary_only)
    registry = make_registry(scripted, faulty=True)
    session = registry.session("prep-forced")
    session.append(conversation(6))
    armed = store.arm_cooldown("prep-forced", 600, "earlier failure")
    blocker = Blocker()
    registry.store.hooks["transcript"] = blocker  # after the snapshot and clear, step 5 hangs
    thread, box = run_in_thread(lambda: session.compress(force=True))
    assert blocker.entered.wait(10)
    assert store.cooldown("prep-forced") is None  # the forced attempt cleared it

    assert session.interrupt() is True
    assert store.cooldown("prep-forced") == armed  # restored on the interrupting thread
    assert store.current_lease("prep-forced") is None
    thread.join(10)
    assert (result_of(thread, box).status, box["value"].reason) == (S.CANCELLED, "interrupted")
    blocker.release.set()

    registry.close()  # waits for the actor thread, which repeats its cleanup
    assert store.cooldown("prep-forced") == armed
    assert store.current_lease("prep-forced") is None and scripted.calls == 0


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


# -- lineage errors reach every caller, after the cleanup ----------------------------------


def test_forked_lineage_is_raised_on_start_and_while_adopting(make_registry, store):
    scripted = ScriptedCompressor(summary_only)
    registry = make_registry(scripted)
    session = registry.session("fork-p")
    session.append(conversation(4))
    # a fork made behind the library's back (the incident's shape)
    store.end_session("fork-p", "compression")
    store.create_session("fork-c1", parent_session_id="fork-p")
    store.create_session("fork-c2", parent_session_id="fork-p")

    with pytest.raises(LineageForkedError):
        session.compress()
    assert store.current_lease("fork-p") is None
    assert scripted.calls == 0
    with pytest.raises(LineageForkedError):
        make_registry().session("fork-p")


def test_session_ended_for_another_reason_is_raised(make_registry, store):
    session = make_registry(ScriptedCompressor(summary_only)).session("ended")
    session.append(conversation(4))
    store.end_session("ended", "user_closed")
    with pytest.raises(SessionEndedError) as info:
        session.append("user", "too late")
    assert info.value.successor_id is None
    with pytest.raises(SessionEndedError):
        session.compress()
    assert store.current_lease("ended") is None
    assert [m.content for m in store.transcript("ended")] == [f"turn {i}" for i in range(4)]


def test_failed_cooldown_restore_surfaces_and_still_frees_the_lease(make_registry, store):
    gated = GatedCompressor()
    registry = make_registry(gated, faulty=True)

    def broken_restore(real, *args, **kwargs):
        raise OSError("restore failed (injected)")

    registry.store.hooks["restore_cooldown"] = broken_restore
    session = registry.session("restore-fail")
    session.append(conversation(6))
    store.arm_cooldown("restore-fail", 120, "must be restored")
    thread, box = run_in_thread(lambda: session.compress(force=True))
    assert gated.wait_started(10)
    assert session.interrupt() is True
    with pytest.raises(OSError, match="restore failed"):
        result_of(thread, box)
    assert store.current_lease("restore-fail") is None


def test_a_compressor_failure_is_logged_with_its_error_and_the_cooldown(make_registry, caplog):
    session = make_registry(ScriptedCompressor(RuntimeError("model exploded")), cooldown_s=600).session("logged")
    session.append(conversation(6))
    with caplog.at_level("WARNING", logger="session_actors"):
        assert session.compress().status is S.FAILED
    lines = [r.getMessage() for r in caplog.records if "compaction of logged failed" in r.getMessage()]
    assert lines and "model exploded" in lines[0] and "600" in lines[0]
