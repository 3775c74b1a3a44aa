"""Many paths, one session: items 1, 2, 17, 18, 19 of issue 3.

Real threads, real stores; a second `SessionRegistry` on the same database
stands for a second process.
"""

from __future__ import annotations

import threading
import time

import pytest

from actors import CompactionPolicy, RegistryClosedError, SessionRegistry
from actors.testing import GatedCompressor, ScriptedCompressor, summary_only
from persistence import open_store
from protocol import CompressionDisabledError, CompressionStatus
from protocol._commands import Compress

from .helpers import Blocker, conversation, result_of, run_in_thread, wait_until

S = CompressionStatus


# -- 1: main + second handle + review at once, many times ---------------------------------

ROUNDS = 200


@pytest.mark.timeout(120)
def test_paths_of_one_process_share_one_attempt_repeatedly(sqlite_path):
    store = open_store(sqlite_path)
    try:
        for round_no in range(ROUNDS):
            mode = "rotate" if round_no % 2 else "in_place"
            _one_round(store, f"r{round_no}", mode)
    finally:
        store.close()


def _one_round(store, sid: str, mode: str) -> None:
    gated = GatedCompressor()
    with SessionRegistry(store, compressor=gated, policy=CompactionPolicy(mode=mode)) as registry:
        main = registry.session(sid)
        main.append(conversation(4))
        second = registry.session(sid)
        review = registry.review(sid)
        barrier = threading.Barrier(3)

        def compress(handle):
            barrier.wait(5)
            return handle.compress()

        def review_path():
            barrier.wait(5)
            try:  # the review path tries to compress too: refused, never a second attempt
                review.ask(Compress())
            except CompressionDisabledError:
                pass
            else:
                raise AssertionError("a review handle compressed")
            return review.append("assistant", "review note")

        callers = [
            run_in_thread(lambda: compress(main)),
            run_in_thread(lambda: compress(second)),
            run_in_thread(review_path),
        ]
        assert gated.wait_started(10)
        wait_until(lambda: registry.stats()["compress_requests"] == 3, what="all compress calls")
        gated.release()
        first, other, _ = (result_of(t, b) for t, b in callers)

    assert first == other, "callers joined to one attempt must see one outcome"
    assert gated.calls == 1
    expected = S.ROTATED if mode == "rotate" else S.COMPACTED
    assert first.status is expected
    children = store.children(sid)
    assert len(children) == (1 if mode == "rotate" else 0)
    assert main.session_id == second.session_id == review.session_id == first.session_id
    live = store.transcript(first.session_id)
    assert any(m.content == "review note" for m in live + store.archive(sid))
    assert store.leases() == []


# -- 2: two processes ---------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_two_registries_compress_once_loser_skips_then_adopts(make_registry, store):
    gated = [GatedCompressor(), GatedCompressor()]
    handles = [make_registry(g).session("s2") for g in gated]
    handles[0].append(conversation(6))
    barrier = threading.Barrier(2)

    def compress(handle):
        barrier.wait(5)
        return handle.compress()

    callers = [run_in_thread(lambda h=h: compress(h)) for h in handles]
    wait_until(lambda: any("value" in b or "error" in b for _, b in callers), what="the loser")
    loser = next(i for i, (_, b) in enumerate(callers) if "value" in b or "error" in b)
    winner = 1 - loser
    lost = result_of(*callers[loser])
    assert (lost.status, lost.reason) == (S.SKIPPED, "lease_held")
    for g in gated:
        g.release()
    won = result_of(*callers[winner])

    assert won.status is S.COMPACTED
    assert gated[winner].calls == 1 and gated[loser].calls == 0
    adopted = handles[loser].compress()
    assert adopted.status is S.ADOPTED
    assert gated[loser].calls == 0
    assert store.get_session("s2").epoch == 1


# -- 17: interrupt while the actor thread is stuck in the store ---------------------------


@pytest.mark.timeout(60)
def test_interrupt_is_prompt_while_actor_is_stuck_in_a_store_call(make_registry, store):
    gated = GatedCompressor()
    registry = make_registry(gated, faulty=True)
    session = registry.session("s17")
    session.append(conversation(6))
    compressing = run_in_thread(session.compress)
    assert gated.wait_started(10)
    blocker = Blocker()
    registry.store.hooks["append"] = blocker
    appending = run_in_thread(lambda: session.append("user", "slow write"))
    assert blocker.entered.wait(10)

    started = time.monotonic()
    assert session.interrupt() is True
    assert time.monotonic() - started < 1.0
    assert store.current_lease("s17") is None

    blocker.release.set()
    assert result_of(*appending).content == "slow write"
    outcome = result_of(*compressing)
    assert (outcome.status, outcome.reason) == (S.CANCELLED, "interrupted")
    assert store.compactions("s17") == []


# -- 18: sixteen threads, one new id ------------------------------------------------------


@pytest.mark.timeout(60)
def test_sixteen_threads_on_a_new_id_get_one_session_one_actor_one_attempt(make_registry, store):
    gated = GatedCompressor()
    registry = make_registry(gated)
    barrier = threading.Barrier(16)
    handles = [None] * 16

    def get(i):
        barrier.wait(5)
        handles[i] = registry.session("brand-new", source="web")
        return handles[i]

    getters = [run_in_thread(lambda i=i: get(i)) for i in range(16)]
    for t, b in getters:
        result_of(t, b)
    assert registry.stats()["actors_started"] == 1
    assert registry.stats()["resident"] == 1
    assert [s.id for s in store.sessions()] == ["brand-new"]
    handles[0].append(conversation(6))

    barrier2 = threading.Barrier(16)

    def compress(handle):
        barrier2.wait(5)
        return handle.compress()

    callers = [run_in_thread(lambda h=h: compress(h)) for h in handles]
    assert gated.wait_started(10)
    wait_until(lambda: registry.stats()["compress_requests"] == 16, what="16 compress calls")
    gated.release()
    outcomes = [result_of(t, b) for t, b in callers]
    assert gated.calls == 1
    assert all(o == outcomes[0] for o in outcomes)
    assert outcomes[0].status is S.COMPACTED


# -- 19: close() with a compaction in flight ----------------------------------------------


@pytest.mark.timeout(60)
def test_close_interrupts_the_attempt_in_flight_and_frees_the_lease(store_url, store):
    gated = GatedCompressor()
    own_store = open_store(store_url)
    try:
        registry = SessionRegistry(own_store, compressor=gated)
        session = registry.session("s19")
        session.append(conversation(6))
        compressing = run_in_thread(session.compress)
        assert gated.wait_started(10)
        registry.close(drain_s=0)  # no drain: the gated attempt would never finish, its interruption is under test
        outcome = result_of(*compressing)
        assert (outcome.status, outcome.reason) == (S.CANCELLED, "interrupted")
        assert store.current_lease("s19") is None
        assert store.leases() == []
        assert registry.stats()["resident"] == 0
        registry.close()  # idempotent
        with pytest.raises(RegistryClosedError):
            session.append("user", "after close")
        with pytest.raises(RegistryClosedError):
            registry.session("s19")
    finally:
        own_store.close()


def test_a_scripted_commit_round_trip(make_registry, store):
    """Sanity: a plain compress through the registry writes one record with our holder."""
    registry = make_registry(ScriptedCompressor(summary_only), holder="host-a:1:abc")
    session = registry.session("plain")
    session.append(conversation(6))
    outcome = session.compress()
    assert outcome.status is S.COMPACTED
    (record,) = store.compactions("plain")
    assert record.holder == "host-a:1:abc" and record.token >= 1
    assert record.archived_count == 6


# -- hand-over: an actor moving onto a live id another actor already serves -----------------


@pytest.mark.timeout(60)
def test_moving_onto_a_resident_live_id_hands_over(make_registry, store):
    ours = make_registry(ScriptedCompressor(summary_only))
    stale = ours.session("hp")
    stale.append(conversation(4))
    rotated = make_registry(ScriptedCompressor(summary_only), mode="rotate").session("hp").compress()
    child = rotated.session_id
    fresh = ours.session(child)  # a second actor here, for the child
    assert ours.stats()["resident"] == 2

    stale.append("user", "via the stale handle")  # redirect onto the child: hand over

    assert ours.stats()["resident"] == 1
    assert stale.session_id == fresh.session_id == child
    assert [m.content for m in fresh.transcript()][-1] == "via the stale handle"
    assert ours.session("hp").session_id == child
    outcome = fresh.compress()
    assert outcome.status is CompressionStatus.COMPACTED
