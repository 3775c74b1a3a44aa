"""Contract: leases with fencing tokens (acquire, renew, release, expiry, takeover)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from protocol import InvalidArgumentError, Lease
from tests.persistence.contract.db import snapshot, wait_for

SHORT_TTL = 0.3


def test_acquire_renew_release_cycle(store):
    store.create_session("s")
    lease = store.acquire_lease("s", "A", 30)
    assert isinstance(lease, Lease)
    assert (lease.session_id, lease.holder, lease.token) == ("s", "A", 1)
    assert lease.expires_at > lease.acquired_at
    assert store.current_lease("s") == lease
    assert store.leases() == [lease]
    renewed = store.renew_lease(lease, 60)
    assert renewed is not None and renewed.token == 1 and renewed.holder == "A"
    assert renewed.expires_at >= lease.expires_at
    assert store.release_lease(renewed) is True
    assert store.current_lease("s") is None
    assert store.leases() == []
    assert store.release_lease(renewed) is False  # already released
    assert store.renew_lease(renewed, 30) is None  # final


def test_live_lease_refuses_other_holders(store):
    store.create_session("s")
    lease = store.acquire_lease("s", "A", 30)
    assert store.acquire_lease("s", "B", 30) is None
    assert store.current_lease("s") == lease
    again = store.acquire_lease("s", "A", 30)  # same holder: a new lease, token + 1
    assert again is not None and again.token == lease.token + 1
    assert store.renew_lease(lease, 30) is None  # the old token is dead
    assert store.release_lease(lease) is False
    assert store.current_lease("s") == again


def test_only_current_holder_and_token_can_renew_or_release(store):
    store.create_session("s")
    lease = store.acquire_lease("s", "A", 30)
    forged_holder = dataclasses.replace(lease, holder="B")
    forged_token = dataclasses.replace(lease, token=lease.token + 5)
    for forged in (forged_holder, forged_token):
        assert store.renew_lease(forged, 30) is None
        assert store.release_lease(forged) is False
    assert store.current_lease("s") == lease


def test_expired_lease_is_taken_over_with_next_token(store):
    store.create_session("s")
    old = store.acquire_lease("s", "A", SHORT_TTL)
    wait_for(lambda: store.current_lease("s") is None)
    assert store.leases() == [old]  # expired but never released: still listed
    assert store.renew_lease(old, 30) is None  # expired: final
    new = store.acquire_lease("s", "B", 30)
    assert new is not None and new.holder == "B" and new.token == old.token + 1
    assert store.release_lease(old) is False
    assert store.current_lease("s") == new


def test_token_never_goes_backwards(store):
    store.create_session("s")
    tokens = []
    for holder in ("A", "B", "A", "C"):
        lease = store.acquire_lease("s", holder, 30)
        tokens.append(lease.token)
        assert store.release_lease(lease)
    expired = store.acquire_lease("s", "D", SHORT_TTL)
    tokens.append(expired.token)
    wait_for(lambda: store.current_lease("s") is None)
    tokens.append(store.acquire_lease("s", "E", 30).token)
    assert tokens == list(range(1, len(tokens) + 1))


def test_lease_works_on_ended_session(store):
    store.create_session("s")
    store.end_session("s", "user_exit")
    lease = store.acquire_lease("s", "A", 30)
    assert lease is not None and lease.token == 1


@pytest.mark.parametrize("ttl", [0, -1, -0.5, math.inf, -math.inf, math.nan, "10", None, True])
def test_bad_ttl_rejected_and_nothing_written(store, store_url, backend, ttl):
    store.create_session("s")
    lease = store.acquire_lease("s", "A", 30)
    before = snapshot(backend, store_url)
    with pytest.raises(InvalidArgumentError) as caught:
        store.acquire_lease("s", "B", ttl)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(InvalidArgumentError):
        store.renew_lease(lease, ttl)
    assert snapshot(backend, store_url) == before


def test_leases_lists_every_held_row(store):
    for sid in ("a", "b", "c"):
        store.create_session(sid)
    la = store.acquire_lease("a", "A", 30)
    lb = store.acquire_lease("b", "B", 30)
    lc = store.acquire_lease("c", "C", 30)
    store.release_lease(lb)
    assert sorted(store.leases(), key=lambda lease: lease.session_id) == [la, lc]


def test_renew_and_release_of_a_lease_on_an_unknown_session_are_final_answers(store):
    from protocol import Lease

    ghost = Lease("ghost", "h", 1, 0.0, 1e12)
    assert store.renew_lease(ghost, 10) is None
    assert store.release_lease(ghost) is False


def test_reap_releases_expired_leases_keeps_tokens_and_live_leases(store):
    for sid in ("expired", "live", "released", "retaken"):
        store.create_session(sid)
    old = store.acquire_lease("expired", "crashed", SHORT_TTL)
    live = store.acquire_lease("live", "worker", 300)
    store.release_lease(store.acquire_lease("released", "worker", 300))
    wait_for(lambda: store.current_lease("expired") is None)
    assert store.leases() == [old, live]  # expired garbage still listed, sorted by id
    before = snapshot_leases(store)
    assert store.reap_leases() == 1
    assert store.leases() == [live]  # the live lease is untouched
    assert snapshot_leases(store)["live"] == before["live"]
    assert store.reap_leases() == 0  # idempotent
    assert store.renew_lease(old, 30) is None and store.release_lease(old) is False
    new = store.acquire_lease("expired", "worker", 30)
    assert new.token == old.token + 1  # the token was kept: it never goes backwards
    assert store.current_lease("live") == live


def snapshot_leases(store) -> dict[str, object]:
    return {lease.session_id: lease for lease in store.leases()}


def test_a_conversation_started_again_never_reuses_an_erased_lease_token(store):
    """Erasure deletes the lineage's lease rows; the id's next lease starts above
    every token they had, so the erased conversation's lease (same holder, same
    id) can neither renew nor release the new conversation's."""
    store.create_session("s")
    old = store.acquire_lease("s", "A", 30)
    old = store.acquire_lease("s", "A", 30)  # the same holder again: token 2
    store.delete_session("s")
    store.create_session("s")
    new = store.acquire_lease("s", "A", 30)
    assert new is not None and new.token > old.token
    assert store.renew_lease(old, 30) is None
    assert store.release_lease(old) is False
    assert store.current_lease("s") == new
