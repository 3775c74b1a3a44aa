"""Contract: two store instances (two "processes") racing rotations never fork a lineage."""

from __future__ import annotations

import threading

import pytest

from persistence import open_store
from protocol import LeaseLostError, Message, SessionEndedError
from tests.persistence.contract.db import wait_for

ROUNDS = 25
SUMMARY = Message("user", "[CONTEXT COMPACTION] s")


@pytest.mark.timeout(90)
def test_racing_rotations_leave_at_most_one_child(store, store_url):
    other = open_store(store_url)
    stores = [store, other]
    for r in range(ROUNDS):
        store.create_session(f"r{r}")
        store.append(f"r{r}", [Message("user", "q"), Message("assistant", "a")])
    barrier = threading.Barrier(2)
    results: dict[int, list[str]] = {0: [], 1: []}
    errors: list[BaseException] = []

    def contender(n: int) -> None:
        s = stores[n]
        try:
            for r in range(ROUNDS):
                sid = f"r{r}"
                barrier.wait(timeout=20)
                lease = s.acquire_lease(sid, f"holder-{n}", 30)
                if lease is None:
                    results[n].append("lease_held")
                    continue
                try:
                    s.append(sid, Message("user", f"tail {n}"))
                    s.commit_compaction(lease, watermark=2, compacted=[SUMMARY], mode="rotate")
                    results[n].append("rotated")
                except (SessionEndedError, LeaseLostError) as exc:
                    results[n].append(type(exc).__name__)
                finally:
                    s.release_lease(lease)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    try:
        threads = [threading.Thread(target=contender, args=(n,)) for n in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=80)
        assert not errors, errors
        for r in range(ROUNDS):
            sid = f"r{r}"
            kids = store.children(sid)
            assert len(kids) == 1, f"round {r}: {kids}"
            outcomes = sorted([results[0][r], results[1][r]])
            assert outcomes.count("rotated") == 1, outcomes
            assert store.resolve(sid) == kids[0].id
            # everything acknowledged is accounted for: parent archive + child transcript
            child_live = store.transcript(kids[0].id)
            archived = store.archive(sid)
            assert {m.id for m in archived} >= {m.origin_id for m in child_live if m.origin_id}
    finally:
        other.close()


@pytest.mark.timeout(60)
def test_takeover_race_fences_the_stale_holder(store, store_url):
    """A holder whose lease expired loses to the taker even if it commits last or first."""
    other = open_store(store_url)
    try:
        for r in range(10):
            sid = f"t{r}"
            store.create_session(sid)
            store.append(sid, [Message("user", "q"), Message("assistant", "a")])
            stale = store.acquire_lease(sid, "slow", 0.05)
            wait_for(lambda sid=sid: other.current_lease(sid) is None)  # the store says expired
            fresh = other.acquire_lease(sid, "fast", 30)
            assert fresh is not None and fresh.token == stale.token + 1
            order = [(store, stale), (other, fresh)] if r % 2 else [(other, fresh), (store, stale)]
            outcomes = []
            for s, lease in order:
                try:
                    s.commit_compaction(lease, watermark=2, compacted=[SUMMARY], mode="rotate")
                    outcomes.append(lease.holder)
                except LeaseLostError:
                    outcomes.append("lost")
                except SessionEndedError:
                    outcomes.append("ended")
            assert "fast" in outcomes and "slow" not in outcomes
            assert len(store.children(sid)) == 1
            assert store.compactions(sid)[0].token == fresh.token
    finally:
        other.close()
