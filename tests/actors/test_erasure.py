"""registry.delete(): erasure through a registry, stale handles, and actors that meet
a lineage erased elsewhere (another process, `session-actors delete`)."""

from __future__ import annotations

import asyncio

import pytest

from actors.testing import GatedCompressor
from protocol import CompressionStatus, Message, SessionNotFoundError

from .helpers import conversation, result_of, run_in_thread

S = CompressionStatus
pytestmark = pytest.mark.timeout(60)

STALE_CALLS = {
    "append": lambda h: h.append("user", "late"),
    "transcript": lambda h: h.transcript(),
    "archive": lambda h: h.archive(),
    "retract": lambda h: h.retract(),
    "compress": lambda h: h.compress(),
    "interrupt": lambda h: h.interrupt(),
    "turn": lambda h: h.turn().__enter__(),
    "append_async": lambda h: asyncio.run(h.append_async("user", "late")),
}


def _assert_stale(handle) -> None:
    for name, call in STALE_CALLS.items():
        with pytest.raises(SessionNotFoundError):
            call(handle)
            pytest.fail(f"{name} on an erased lineage did not raise")


def test_delete_erases_the_lineage_and_old_handles_fail_for_good(make_registry, store):
    gated = GatedCompressor()
    gated.release()
    registry = make_registry(gated)
    old = registry.session("s", source="discord")
    review = registry.review("s")
    old.append(conversation(4))
    assert old.compress(mode="rotate").status is S.ROTATED
    child = old.session_id
    old.append("user", "in the child")
    total = len(store.archive("s")) + len(store.archive(child)) + len(store.transcript(child))
    assert total >= 6 and registry.delete("s") == total
    assert store.get_session("s") is None and store.get_session(child) is None
    _assert_stale(old)
    with pytest.raises(SessionNotFoundError):
        review.append("assistant", "late review")
    fresh = registry.session("s")  # a new conversation under the same id
    assert fresh.transcript() == []
    fresh.append("user", "hello again")
    _assert_stale(old)  # still: a stale handle never writes into the new conversation
    assert [m.content for m in store.transcript("s")] == ["hello again"]


def test_delete_counts_every_message_of_the_lineage(make_registry, store):
    registry = make_registry()
    session = registry.session("s")
    session.append(conversation(5))
    session.retract()
    assert registry.delete("s") == 5
    with pytest.raises(SessionNotFoundError):
        registry.delete("s")
    with pytest.raises(SessionNotFoundError):
        registry.delete("never-existed")
    registry.session("t").append("user", "x")
    assert asyncio.run(registry.delete_async("t")) == 1


def test_delete_interrupts_the_attempt_in_flight(make_registry, store):
    gated = GatedCompressor()
    registry = make_registry(gated)
    session = registry.session("s")
    session.append(conversation(6))
    thread, box = run_in_thread(session.compress)
    assert gated.wait_started(10)
    assert registry.delete("s") == 6
    outcome = result_of(thread, box)
    assert (outcome.status, outcome.reason) == (S.CANCELLED, "interrupted")
    gated.release()
    assert store.get_session("s") is None and store.leases() == []
    assert registry.stats()["resident"] == 0


def test_an_attempt_in_another_registry_commits_nothing_and_recreates_nothing(make_registry, store):
    gated = GatedCompressor()
    elsewhere = make_registry(gated)  # stands for another process
    here = make_registry()
    remote = elsewhere.session("s")
    remote.append(conversation(6))
    thread, box = run_in_thread(lambda: remote.compress(force=True))
    assert gated.wait_started(10)
    store.arm_cooldown("s", 60, "armed before")  # a forced attempt restores it on failure
    assert here.delete("s") == 6
    gated.release()
    with pytest.raises(SessionNotFoundError):
        result_of(thread, box)
    assert store.get_session("s") is None
    assert store.leases() == [] and store.sessions() == []
    with pytest.raises(SessionNotFoundError):
        store.cooldown("s")
    # the remote actor retired: the next session() there starts a new conversation
    assert elsewhere.session("s").transcript() == []


def test_an_actor_meeting_an_erasure_from_elsewhere_retires(make_registry, store):
    registry = make_registry()
    old = registry.session("s")
    old.append(conversation(3))
    assert store.delete_session("s") == 3  # as `session-actors delete` would
    with pytest.raises(SessionNotFoundError):
        old.append("user", "after erasure")
    assert registry.stats()["resident"] == 0  # retired
    fresh = registry.session("s")
    fresh.append("user", "new")
    _assert_stale(old)
    assert [m.content for m in store.transcript("s")] == ["new"]


def test_an_evicted_handle_never_reaches_a_new_conversation_under_its_id(make_registry, store):
    registry = make_registry(max_resident=1)
    old = registry.session("a")
    old.append("user", "first conversation")
    registry.session("b").append("user", "evicts a")
    assert registry.stats()["resident"] == 1
    store.delete_session("a")  # erased elsewhere while no actor served it here
    store.create_session("a")  # and a new conversation started under the id
    store.append("a", Message("user", "second conversation"))
    with pytest.raises(SessionNotFoundError):
        old.append("user", "stale write")
    assert [m.content for m in store.transcript("a")] == ["second conversation"]
    assert registry.session("a").transcript()[0].content == "second conversation"


def test_a_resident_actor_never_writes_into_a_conversation_started_again_elsewhere(make_registry, store):
    """Another process erases the lineage and starts a new conversation under the id
    before this registry's resident actor touches the store again: the actor's
    append and retraction name its own incarnation, so both are refused inside the
    write, and the actor retires."""
    registry = make_registry()
    old = registry.session("s")
    old.append("user", "first conversation")
    assert registry.stats()["resident"] == 1
    store.delete_session("s")  # elsewhere: no actor of this registry hears of it
    store.create_session("s")
    store.append("s", Message("user", "second conversation"))
    with pytest.raises(SessionNotFoundError):
        old.append("user", "stale write")
    assert registry.stats()["resident"] == 0  # retired
    _assert_stale(old)
    assert [m.content for m in store.transcript("s")] == ["second conversation"]
    assert registry.session("s").transcript()[0].content == "second conversation"


@pytest.mark.parametrize("kind", ["session", "review"])
def test_an_old_handle_never_reads_a_conversation_started_again_elsewhere(make_registry, store, kind):
    """Its reads name the actor's incarnation too: the new conversation's messages
    are refused (SessionNotFoundError), and the actor retires."""
    registry = make_registry()
    old = getattr(registry, kind)("s")
    old.append("user", "first conversation")
    store.delete_session("s")  # elsewhere
    store.create_session("s")
    store.append("s", Message("user", "second conversation"))
    with pytest.raises(SessionNotFoundError):
        old.transcript()
    assert registry.stats()["resident"] == 0  # retired
    with pytest.raises(SessionNotFoundError):
        old.archive()
    assert [m.content for m in registry.session("s").transcript()] == ["second conversation"]


def test_a_resident_actor_never_retracts_from_a_conversation_started_again_elsewhere(make_registry, store):
    registry = make_registry()
    old = registry.session("s")
    old.append("user", "first conversation")
    store.delete_session("s")
    store.create_session("s")
    store.append("s", Message("user", "second conversation"))
    with pytest.raises(SessionNotFoundError):
        old.retract()
    assert [m.content for m in store.transcript("s")] == ["second conversation"]


def test_an_attempt_across_an_erasure_and_re_creation_touches_nothing_of_the_new_conversation(make_registry, store):
    from protocol import Message

    def fails(messages):
        raise RuntimeError("the model failed on the old conversation")

    gated = GatedCompressor(fails)  # a failure arms a cooldown: on which conversation?
    elsewhere = make_registry(gated, cooldown_s=600)  # stands for another process
    remote = elsewhere.session("s")
    remote.append(conversation(6))
    thread, box = run_in_thread(lambda: remote.compress())
    assert gated.wait_started(10)
    assert store.delete_session("s") == 6  # erased, and the id used again at once
    store.create_session("s")
    store.append("s", [Message("user", "a new conversation")])
    gated.release()
    try:  # refused at its commit (erased), or its lease found gone first (lost): never committed
        outcome = result_of(thread, box)
    except SessionNotFoundError:
        outcome = None
    assert outcome is None or outcome.status in (CompressionStatus.LEASE_LOST, CompressionStatus.FAILED), outcome
    assert [m.content for m in store.transcript("s")] == ["a new conversation"]  # no summary of the old
    assert store.cooldown("s") is None  # nor its cooldown
    assert store.compactions("s") == []
