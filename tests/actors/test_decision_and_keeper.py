"""The two small mechanisms under the flow: an attempt's decision and the lease keeper."""

from __future__ import annotations

import threading

import pytest

from actors import CompactionPolicy
from actors.compaction._decision import AttemptDecision, AttemptState
from actors.compaction._lease_keeper import LeaseKeeper

from .helpers import FaultyStore, wait_until

pytestmark = pytest.mark.timeout(30)


def test_decision_admission_and_abort_exclude_each_other():
    decision = AttemptDecision()
    assert decision.start_running() is True
    assert decision.admit() is True
    assert decision.abort() is None  # too late: the commit was admitted
    assert decision.state is AttemptState.ADMITTED

    decision = AttemptDecision()
    assert decision.abort() is AttemptState.PREPARING
    assert decision.start_running() is False
    assert decision.admit() is False
    assert decision.abort() is None  # only one aborter owns the cleanup


def test_decision_race_has_exactly_one_winner():
    for _ in range(200):
        decision = AttemptDecision()
        decision.start_running()
        barrier = threading.Barrier(2)
        results = {}

        def admit():
            barrier.wait(5)
            results["admit"] = decision.admit()

        def abort():
            barrier.wait(5)
            results["abort"] = decision.abort() is not None

        threads = [threading.Thread(target=admit), threading.Thread(target=abort)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(5)
        assert results["admit"] != results["abort"]


def test_a_lease_taken_back_is_handed_to_one_releaser(store):
    store.create_session("f")
    lease = store.acquire_lease("f", "me", 30)
    decision = AttemptDecision()
    assert decision.publish_lease(lease) is True
    assert decision.take_lease() == lease
    assert decision.take_lease() is None
    decision.abort()
    assert decision.publish_lease(lease) is False  # the caller must release it itself
    assert store.release_lease(lease) is True


def test_keeper_renews_extends_expiry_and_times_out(store):
    store.create_session("k")
    faulty = FaultyStore(store)
    renewals = []

    def counting_renew(real, lease, ttl_s):
        renewed = real(lease, ttl_s)
        renewals.append(renewed)
        return renewed

    faulty.hooks["renew_lease"] = counting_renew
    lease = store.acquire_lease("k", "me", 0.6)
    timed_out, lost = threading.Event(), threading.Event()
    keeper = LeaseKeeper(
        faulty,
        lease,
        CompactionPolicy(lease_ttl_s=0.6, max_compaction_s=1.0),
        on_lost=lost.set,
        on_timeout=timed_out.set,
    )
    keeper.start()
    try:
        wait_until(lambda: len(renewals) >= 3, what="three renewals")
        assert keeper.owned()
        assert all(r is not None for r in renewals)
        assert store.current_lease("k").expires_at > lease.expires_at
        assert timed_out.wait(5)
        assert not lost.is_set()
    finally:
        keeper.stop()
        keeper.join(5)
    assert not keeper.thread.is_alive()


def test_keeper_reports_a_takeover_as_lost(store):
    store.create_session("k2")
    lease = store.acquire_lease("k2", "me", 0.3)
    wait_until(lambda: store.acquire_lease("k2", "thief", 30) is not None, what="takeover")
    lost = threading.Event()
    keeper = LeaseKeeper(store, lease, CompactionPolicy(lease_ttl_s=0.3), on_lost=lost.set, on_timeout=lambda: None)
    keeper.start()
    try:
        assert lost.wait(5)
        assert not keeper.owned()
    finally:
        keeper.stop()
        keeper.join(5)


def test_keeper_retries_sooner_after_transient_failures_and_keeps_the_lease(store):
    """Two failed renews in a row must not cost the lease: with ttl 0.6 s the
    renew interval is 0.2 s and the self-fence 0.54 s, so only early retries
    (interval/4 after a failure) reach a successful renew in time."""
    store.create_session("k3")
    faulty = FaultyStore(store)
    calls = []
    renewed_after_failures = threading.Event()

    def flaky_renew(real, lease, ttl_s):
        calls.append(lease.token)
        if len(calls) <= 2:
            raise OSError("transient renew failure (injected)")
        result = real(lease, ttl_s)
        if result is not None:
            renewed_after_failures.set()
        return result

    faulty.hooks["renew_lease"] = flaky_renew
    lease = store.acquire_lease("k3", "me", 0.6)
    lost = threading.Event()
    keeper = LeaseKeeper(
        faulty, lease, CompactionPolicy(lease_ttl_s=0.6, max_compaction_s=30), on_lost=lost.set, on_timeout=lambda: None
    )
    keeper.start()
    try:
        assert renewed_after_failures.wait(5)
        assert not lost.is_set() and keeper.owned()
    finally:
        keeper.stop()
        keeper.join(5)
