"""Contract: turn leases (open, renew, close, interrupt, rollback) and the check every
append and retract makes against another holder's live turn."""

from __future__ import annotations

import threading

import pytest

from protocol import (
    DeadTurnError,
    InvalidArgumentError,
    Lease,
    Message,
    SessionEndedError,
    SessionNotFoundError,
    TurnHeldError,
    TurnLease,
    TurnLostError,
)
from tests.persistence.contract.db import execute, snapshot, wait_for

SHORT_TTL = 0.3


def _contents(store, sid="s"):
    return [m.content for m in store.transcript(sid)]


def test_open_renew_close_cycle(store):
    store.create_session("s")
    lease = store.open_turn("s", "A", 30)
    assert isinstance(lease, TurnLease)
    assert (lease.session_id, lease.holder, lease.interrupted) == ("s", "A", False)
    assert store.current_turn("s") == lease
    assert store.turns() == [lease] and store.turns(holder="B") == []
    renewed = store.renew_turn(lease, 60)
    assert renewed is not None and renewed.token == lease.token and renewed.expires_at >= lease.expires_at
    assert store.close_turn(renewed) is True
    assert store.current_turn("s") is None and store.turns() == []
    assert store.close_turn(renewed) is False  # already closed
    assert store.renew_turn(renewed, 30) is None


def test_tokens_only_grow_even_across_erasure_and_recreation(store):
    store.create_session("s")
    first = store.open_turn("s", "A", 30)
    store.close_turn(first)
    second = store.open_turn("s", "B", 30)
    assert second.token > first.token
    store.delete_session("s")
    store.create_session("s")
    third = store.open_turn("s", "A", 30)
    assert third.token > second.token
    assert store.renew_turn(second, 30) is None  # the erased conversation's lease is gone


def test_another_holders_live_turn_refuses_turns_appends_and_retracts(store, store_url, backend):
    store.create_session("s")
    store.append("s", Message("user", "before"))
    lease = store.open_turn("s", "A", 30)
    before = snapshot(backend, store_url)
    with pytest.raises(TurnHeldError) as caught:
        store.open_turn("s", "B", 30)
    assert (caught.value.holder, caught.value.token) == ("A", lease.token)
    assert caught.value.expires_at == pytest.approx(lease.expires_at)
    with pytest.raises(TurnHeldError):
        store.append("s", Message("user", "outside the turn"))
    with pytest.raises(TurnHeldError):
        store.append("s", [Message("user", "keyed", key="k1")])
    with pytest.raises(TurnHeldError):
        store.retract("s")
    assert snapshot(backend, store_url) == before  # every refusal wrote nothing
    stored = store.append("s", Message("assistant", "in the turn"), turn=lease)
    assert stored[0].seq == 2
    assert store.current_turn("s").first_seq == 2
    assert store.retract("s", turn=lease).content == "in the turn"
    store.close_turn(lease)
    assert store.append("s", Message("user", "after"))[0].seq == 3


def test_a_batch_with_a_held_session_fails_only_that_request(store):
    if not hasattr(store, "append_nowait"):
        pytest.skip("no submitted appends")
    for sid in ("held", "free"):
        store.create_session(sid)
    store.open_turn("held", "A", 30)
    both = threading.Event()
    outcomes: dict[str, object] = {}

    def answer(sid):
        def on_done(built, error):  # on the writer thread: quick, never waits
            outcomes[sid] = error if error is not None else built()
            if len(outcomes) == 2:
                both.set()

        return on_done

    submitted = [store.append_nowait(sid, Message("user", sid), answer(sid)) for sid in ("held", "free")]
    if not all(submitted):
        pytest.skip("this store has no writer thread")
    assert both.wait(10)
    assert isinstance(outcomes["held"], TurnHeldError)
    assert [m.content for m in outcomes["free"]] == ["free"]


def test_an_expired_turn_is_dead_until_sealed_then_can_be_taken_over(store):
    store.create_session("s")
    lease = store.open_turn("s", "A", SHORT_TTL)
    wait_for(lambda: store.current_turn("s") is None)
    with pytest.raises(DeadTurnError):  # lapsed while held: nobody writes before the seal
        store.append("s", Message("user", "after expiry"))
    assert store.seal_turn("s") == 0
    assert store.append("s", Message("user", "after expiry"))[0].seq == 1
    assert store.renew_turn(lease, 30) is None  # lost: never renewed back
    taken = store.open_turn("s", "B", 30)
    assert taken.token > lease.token
    assert store.close_turn(lease) is False


def test_an_append_under_a_lapsed_lease_is_refused_and_writes_nothing(store, store_url, backend):
    store.create_session("s")
    lease = store.open_turn("s", "A", SHORT_TTL)
    store.append("s", Message("user", "in time"), turn=lease)
    wait_for(lambda: store.current_turn("s") is None)
    before = snapshot(backend, store_url)
    with pytest.raises(DeadTurnError):  # its own turn is dead too: sealed before anything lands
        store.append("s", Message("assistant", "too late"), turn=lease)
    with pytest.raises(DeadTurnError):
        store.retract("s", turn=lease)
    assert snapshot(backend, store_url) == before
    assert _contents(store) == ["in time"]


def test_same_holder_takes_its_own_lingering_lease(store):
    store.create_session("s")
    lost = store.open_turn("s", "A", 30)
    again = store.open_turn("s", "A", 30)
    assert again.token > lost.token
    with pytest.raises(TurnHeldError):
        store.append("s", Message("user", "old token"), turn=lost)


def test_interrupt_sets_a_flag_the_holder_reads(store):
    store.create_session("s")
    assert store.interrupt_turn("s") is False  # nothing open
    lease = store.open_turn("s", "A", 30)
    assert store.interrupted_turns("A") == []
    assert store.interrupt_turn("s") is True
    assert [t.token for t in store.interrupted_turns("A")] == [lease.token]
    assert store.renew_turn(lease, 30).interrupted is True
    store.close_turn(lease)
    assert store.interrupted_turns("A") == []


def test_rollback_retracts_the_interrupted_turns_trailing_messages(store):
    store.create_session("s")
    store.append("s", Message("user", "keep"))
    first = store.open_turn("s", "A", 30)
    store.append("s", [Message("user", "q"), Message("assistant", "partial")], turn=first)
    store.close_turn(first)
    second = store.open_turn("s", "B", 30, rollback=first.token)
    assert second.rolled_back == 2
    assert _contents(store) == ["keep"]
    assert [(m.content, m.state) for m in store.archive("s")] == [("q", "retracted"), ("partial", "retracted")]
    store.close_turn(second)
    third = store.open_turn("s", "C", 30, rollback=first.token)  # nothing of it is left at the end
    assert third.rolled_back == 0 and _contents(store) == ["keep"]


def _retracted(store, sid="s"):
    return [m.content for m in store.archive(sid) if m.state == "retracted"]


def _closed_turn(store, holder, contents, sid="s"):
    """A turn of ``holder`` that appended ``contents`` and ended (its lease released)."""
    lease = store.open_turn(sid, holder, 30)
    store.append(sid, [Message("user" if i % 2 == 0 else "assistant", c) for i, c in enumerate(contents)], turn=lease)
    assert store.close_turn(lease) is True
    return lease


def test_rollback_takes_nothing_once_another_writer_appended_after_the_turn(store):
    """Only rows still at the end of the live transcript are rolled back: taking the turn's
    rows from under a later message would leave that message answering a hole."""
    store.create_session("s")
    store.append("s", Message("user", "keep"))
    first = _closed_turn(store, "A", ["q", "partial"])
    store.append("s", Message("user", "a later writer"))  # after the turn's lease ended
    second = store.open_turn("s", "B", 30, rollback=first.token)
    assert second.rolled_back == 0
    assert _contents(store) == ["keep", "q", "partial", "a later writer"]
    assert [m.seq for m in store.transcript("s")] == [1, 2, 3, 4]
    assert _retracted(store) == []


def test_rollback_leaves_a_turn_followed_by_another_turn_and_takes_only_that_ones_rows(store):
    store.create_session("s")
    first = _closed_turn(store, "A", ["q1", "a1"])
    later = _closed_turn(store, "B", ["q2", "a2"])
    third = store.open_turn("s", "C", 30, rollback=first.token)  # first's rows are not at the end
    assert third.rolled_back == 0 and _contents(store) == ["q1", "a1", "q2", "a2"]
    store.close_turn(third)
    fourth = store.open_turn("s", "C", 30, rollback=later.token)  # the trailing turn's rows: only its own
    assert fourth.rolled_back == 2
    assert _contents(store) == ["q1", "a1"] and _retracted(store) == ["q2", "a2"]


def test_rollback_takes_the_turns_rows_again_at_the_end_once_the_later_row_was_retracted(store):
    store.create_session("s")
    first = _closed_turn(store, "A", ["q", "partial"])
    store.append("s", Message("user", "a later writer"))
    assert store.retract("s").content == "a later writer"  # archived as retracted: no longer live
    second = store.open_turn("s", "B", 30, rollback=first.token)
    assert second.rolled_back == 2
    assert _contents(store) == [] and _retracted(store) == ["q", "partial", "a later writer"]


def test_rollback_takes_only_the_turns_trailing_rows_when_another_row_sits_between_them(store, store_url, backend):
    """Rows of one turn on both sides of another writer's (a state planted in the database:
    the store never writes it). Only the run at the end goes; the rows before the other
    writer's stay, with no hole."""
    store.create_session("s")
    first = _closed_turn(store, "A", ["q", "a"])
    store.append("s", [Message("user", "another writer"), Message("assistant", "c")])
    execute(backend, store_url, f"UPDATE messages SET turn = {first.token} WHERE seq = 4")
    second = store.open_turn("s", "B", 30, rollback=first.token)
    assert second.rolled_back == 1
    assert _contents(store) == ["q", "a", "another writer"] and _retracted(store) == ["c"]


def test_rotation_carries_the_turn_and_never_snapshots_into_it(store):
    store.create_session("s")
    store.append("s", [Message("user", f"m{i}") for i in range(4)])
    turn = store.open_turn("s", "A", 30)
    store.append("s", [Message("user", "t1"), Message("assistant", "t2")], turn=turn)
    lease = store.acquire_lease("s", "C", 30)
    with pytest.raises(TurnHeldError):  # a snapshot reaching into the open turn commits nothing
        store.commit_compaction(lease, watermark=5, compacted=[Message("user", "summary")], mode="rotate")
    assert _contents(store) == ["m0", "m1", "m2", "m3", "t1", "t2"]
    record = store.commit_compaction(lease, watermark=4, compacted=[Message("user", "summary")], mode="rotate")
    child = record.child_session_id
    assert _contents(store, child) == ["summary", "t1", "t2"]
    carried = store.current_turn(child)
    assert carried is not None and carried.token == turn.token and carried.first_seq == 2
    with pytest.raises(TurnHeldError):  # the continuation is held by the same turn
        store.append(child, Message("user", "outside"))
    store.append(child, Message("assistant", "t3"), turn=turn)
    assert store.renew_turn(turn, 30).session_id == child
    assert store.close_turn(turn) is True
    assert _contents(store, child) == ["summary", "t1", "t2", "t3"]


def test_open_turn_on_ended_unknown_and_other_incarnation(store):
    store.create_session("s")
    store.end_session("s", "done")
    with pytest.raises(SessionEndedError):
        store.open_turn("s", "A", 30)
    with pytest.raises(SessionNotFoundError):
        store.open_turn("nope", "A", 30)
    store.create_session("t")
    with pytest.raises(SessionNotFoundError):
        store.open_turn("t", "A", 30, incarnation="not-this-one")


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.open_turn("s", "", 30),
        lambda s: s.open_turn("s", "A", 0),
        lambda s: s.open_turn("s", "A", 30, rollback=0),
        lambda s: s.renew_turn(Lease("s", "A", 1, 0.0, 1.0), 30),
        lambda s: s.close_turn("not a lease"),
        lambda s: s.append("s", Message("user", "x"), turn=object()),
    ],
)
def test_bad_turn_arguments_are_typed_and_write_nothing(store, store_url, backend, call):
    store.create_session("s")
    before = snapshot(backend, store_url)
    with pytest.raises(InvalidArgumentError):
        call(store)
    assert snapshot(backend, store_url) == before


def test_the_database_holds_each_rows_turn(store, store_url, backend):
    store.create_session("s")
    turn = store.open_turn("s", "A", 30)
    store.append("s", Message("user", "in"), turn=turn)
    store.close_turn(turn)
    store.append("s", Message("user", "out"))
    rows = execute(backend, store_url, "SELECT content, turn FROM messages ORDER BY seq")
    assert rows == [('"in"', turn.token), ('"out"', None)]
