"""Contract: dead turns, sealing them, keyed turns, and a close that races a rotation.

A turn is dead when its lease lapsed while its holder still held it. It refuses every
write (whoever writes, its holder included) until `seal_turn` ends it, retracting
what would leave the transcript invalid for a chat API. A keyed turn that completed
replays what it stored instead of opening again.

Leases lapse without waiting: SQLite's store clock is moved past them; PostgreSQL,
whose clock is its server's, renews the lease for a microsecond.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from persistence import SourceScopedStore, Store, open_store
from persistence._integrity import check_store
from protocol import (
    AccessDeniedError,
    DeadTurnError,
    InvalidArgumentError,
    InvalidMessageError,
    Message,
    SessionNotFoundError,
    TurnHeldError,
    TurnLease,
    TurnReplayedError,
)
from protocol._transcript import invalid_tool_pairing
from tests.persistence.contract.db import execute, pg_connect, snapshot, wait_for

pytestmark = pytest.mark.timeout(60)

Lapse = Callable[[TurnLease], None]


@pytest.fixture
def clock_offset() -> list[float]:
    """Seconds the SQLite store's clock runs ahead of the wall clock (moved by `lapse`)."""
    return [0.0]


@pytest.fixture
def store(store_url: str, backend: str, clock_offset: list[float]) -> Iterator[Store]:
    if backend == "sqlite":
        opened = open_store(store_url, clock=lambda: time.time() + clock_offset[0])
    else:
        opened = open_store(store_url)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def lapse(store: Store, backend: str, clock_offset: list[float]) -> Lapse:
    """Make ``lease`` lapse while its holder still holds it: its turn is dead."""

    def lapse(lease: TurnLease) -> None:
        if backend == "sqlite":
            clock_offset[0] += lease.expires_at - store.now() + 1
        else:
            renewed = store.renew_turn(lease, 1e-6)
            assert renewed is not None
            wait_for(lambda: store.current_turn(renewed.session_id) is None)
        assert store.current_turn(lease.session_id) is None

    return lapse


def ask(text: str = "what is the weather?") -> Message:
    return Message("user", text)


def call(*ids: str) -> Message:
    return Message(
        "assistant", None, tool_calls=[{"id": i, "type": "function", "function": {"name": "f"}} for i in ids]
    )


def result(call_id: str) -> Message:
    return Message("tool", f"result of {call_id}", tool_call_id=call_id)


def _contents(store: Store, sid: str = "s") -> list[Any]:
    return [(m.role, m.content, m.tool_call_id) for m in store.transcript(sid)]


def _dead_turn(store: Store, lapse: Lapse, messages: list[Message], sid: str = "s") -> TurnLease:
    """A turn of holder "A" that appended ``messages`` and died (its lease lapsed)."""
    lease = store.open_turn(sid, "A", 30)
    store.append(sid, messages, turn=lease)
    lapse(lease)
    return lease


def _whole(store: Store, sid: str) -> bool:
    """Every tool call of the live transcript is followed by its results, every result by its call."""
    live = store.transcript(sid)
    return invalid_tool_pairing(live, live) is None


def _fsck_clean(store: Store) -> None:
    report = check_store(store)
    assert report.ok, report.problems


# -- dead turns ---------------------------------------------------------------------------


def test_a_dead_turn_refuses_every_write_and_writes_nothing(store, store_url, backend, lapse):
    store.create_session("s")
    store.append("s", Message("user", "before"))
    lease = _dead_turn(store, lapse, [ask(), call("c1")])
    before = snapshot(backend, store_url)
    refused = [
        lambda: store.append("s", Message("user", "plain")),
        lambda: store.append("s", [Message("user", "keyed", key="k1")]),
        lambda: store.append("s", [Message("user", "two"), Message("user", "rows")]),
        lambda: store.append("s", Message("tool", "late result", tool_call_id="c1"), turn=lease),  # its holder's
        lambda: store.retract("s"),
        lambda: store.retract("s", turn=lease),
        lambda: store.open_turn("s", "B", 30),
        lambda: store.open_turn("s", "A", 30),  # the dead holder itself
    ]
    for n, write in enumerate(refused):
        with pytest.raises(DeadTurnError) as caught:
            write()
        assert (caught.value.session_id, caught.value.holder, caught.value.token) == ("s", "A", lease.token), n
        assert isinstance(caught.value, TurnHeldError)
        assert snapshot(backend, store_url) == before, n
    assert [c for _, c, _ in _contents(store)] == ["before", "what is the weather?", None]


def test_a_submitted_append_to_a_dead_turn_fails_alone_at_once(store, lapse):
    if not hasattr(store, "append_nowait"):
        pytest.skip("no submitted appends")
    for sid in ("dead", "free"):
        store.create_session(sid)
    _dead_turn(store, lapse, [ask()], sid="dead")
    both = threading.Event()
    outcomes: dict[str, Any] = {}

    def answer(sid: str) -> Callable[[Any, BaseException | None], None]:
        def on_done(built: Any, error: BaseException | None) -> None:  # writer thread: quick
            outcomes[sid] = error if error is not None else built()
            if len(outcomes) == 2:
                both.set()

        return on_done

    began = time.monotonic()
    assert all(store.append_nowait(sid, Message("user", sid), answer(sid)) for sid in ("dead", "free"))
    assert both.wait(10)
    assert isinstance(outcomes["dead"], DeadTurnError)  # not set aside and tried again
    assert time.monotonic() - began < 5  # far below the store's patience
    assert [m.content for m in outcomes["free"]] == ["free"]
    assert [m.content for m in store.transcript("dead")] == ["what is the weather?"]


def test_a_compaction_snapshot_into_a_dead_turn_is_refused_and_the_child_carries_it(store, lapse):
    store.create_session("s")
    store.append("s", [Message("user", f"m{i}") for i in range(3)])
    lease = _dead_turn(store, lapse, [ask(), call("c1")])
    compaction = store.acquire_lease("s", "C", 30)
    with pytest.raises(TurnHeldError):  # the dead turn's rows stay out of a snapshot
        store.commit_compaction(compaction, watermark=4, compacted=[Message("user", "summary")], mode="rotate")
    record = store.commit_compaction(compaction, watermark=3, compacted=[Message("user", "summary")], mode="rotate")
    child = record.child_session_id
    assert [c for _, c, _ in _contents(store, child)] == ["summary", "what is the weather?", None]
    with pytest.raises(DeadTurnError) as caught:  # the continuation carries the dead turn
        store.append(child, Message("user", "outside"))
    assert caught.value.token == lease.token
    assert store.seal_turn(child) == 1  # sealed there, on the copies: the dangling call goes
    assert [c for _, c, _ in _contents(store, child)] == ["summary", "what is the weather?"]
    assert store.append(child, Message("user", "after"))[0].seq == 4
    assert [m.state for m in store.archive(child)] == ["retracted"]
    _fsck_clean(store)


def test_sealing_through_the_parent_id_seals_the_continuation(store, lapse):
    store.create_session("s")
    store.append("s", [Message("user", "m0")])
    _dead_turn(store, lapse, [ask(), call("c1")])
    compaction = store.acquire_lease("s", "C", 30)
    child = store.commit_compaction(
        compaction, watermark=1, compacted=[Message("user", "summary")], mode="rotate"
    ).child_session_id
    assert store.seal_turn("s", mode="rollback") == 2  # resolved to the live tip
    assert [c for _, c, _ in _contents(store, child)] == ["summary"]


SEALED = [ask(), call("c1"), result("c1"), call("c2", "c3"), result("c2")]


@pytest.mark.parametrize(
    ("mode", "retracted", "kept"),
    [
        # the call of c2 and c3 lacks c3's result: it and the partial result go, the ask stays
        ("seal", 2, ["before", "what is the weather?", None, "result of c1"]),
        ("keep", 0, ["before", "what is the weather?", None, "result of c1", None, "result of c2"]),
        ("rollback", 5, ["before"]),
    ],
)
def test_seal_modes(store, store_url, backend, lapse, mode, retracted, kept):
    store.create_session("s")
    store.append("s", Message("user", "before"))
    lease = _dead_turn(store, lapse, SEALED)
    assert store.seal_turn("s", mode=mode) == retracted
    assert [c for _, c, _ in _contents(store)] == kept
    archived = store.archive("s")
    assert [m.state for m in archived] == ["retracted"] * retracted
    assert sorted(m.seq for m in [*store.transcript("s"), *archived]) == list(range(1, 7))  # no seq moved
    if mode != "keep":
        assert _whole(store, "s")
    # the turn is over: its lease released, its token kept
    rows = execute(backend, store_url, "SELECT turn_holder, turn_token, turn_interrupted FROM sessions")
    assert [(holder, token, bool(flag)) for holder, token, flag in rows] == [(None, lease.token, False)]
    assert store.append("s", Message("user", "next"))[0].seq == 7
    assert store.renew_turn(lease, 30) is None and store.close_turn(lease) is False
    taken = store.open_turn("s", "B", 30)
    assert taken.token > lease.token
    _fsck_clean(store)


def test_a_seal_keeps_the_users_asks_after_the_broken_row(store, lapse):
    store.create_session("s")
    _dead_turn(store, lapse, [ask(), call("c1"), ask("and tomorrow?"), Message("assistant", "partial")])
    assert store.seal_turn("s") == 2
    assert [c for _, c, _ in _contents(store)] == ["what is the weather?", "and tomorrow?"]
    assert _whole(store, "s")


def test_rollback_leaves_the_turns_rows_before_another_writers_row(store, store_url, backend, lapse):
    """Rows of one turn on both sides of another writer's (planted: the store never
    writes it while the turn holds the session). Only the run at the end goes."""
    store.create_session("s")
    lease = store.open_turn("s", "A", 30)
    store.append("s", [ask(), Message("assistant", "a"), Message("user", "other"), call("c1")], turn=lease)
    execute(backend, store_url, "UPDATE messages SET turn = NULL WHERE seq = 3")
    lapse(lease)
    assert store.seal_turn("s", mode="rollback") == 1
    assert [c for _, c, _ in _contents(store)] == ["what is the weather?", "a", "other"]


def test_seal_of_a_turn_that_is_not_dead_returns_none_and_writes_nothing(store, store_url, backend):
    store.create_session("s")
    store.append("s", [ask(), call("c1")])
    before = snapshot(backend, store_url)
    assert store.seal_turn("s") is None  # no turn was ever opened
    live = store.open_turn("s", "A", 30)
    store.append("s", Message("assistant", "live"), turn=live)
    before = snapshot(backend, store_url)
    for mode in ("seal", "keep", "rollback"):
        assert store.seal_turn("s", mode=mode) is None  # live: not dead
    assert snapshot(backend, store_url) == before
    assert store.close_turn(live)
    before = snapshot(backend, store_url)
    assert store.seal_turn("s") is None  # closed
    assert store.seal_turn("s", lease=live) is None  # no longer the session's
    assert snapshot(backend, store_url) == before


def test_its_holder_gives_up_a_live_turn_by_sealing_it_with_the_lease(store, store_url, backend):
    store.create_session("s")
    lease = store.open_turn("s", "A", 30)
    store.append("s", [ask(), call("c1", "c2"), result("c1")], turn=lease)
    assert store.seal_turn("s", lease=lease) == 2
    assert [c for _, c, _ in _contents(store)] == ["what is the weather?"]
    assert store.current_turn("s") is None and store.renew_turn(lease, 30) is None
    before = snapshot(backend, store_url)
    assert store.seal_turn("s", lease=lease) is None  # already sealed
    assert snapshot(backend, store_url) == before
    replaced = store.open_turn("s", "A", 30)
    again = store.open_turn("s", "A", 30)  # its registry lost track: the same holder takes it over
    assert store.seal_turn("s", lease=replaced) is None  # replaced: no longer the session's
    assert store.seal_turn("s", lease=TurnLease("s", "B", again.token, again.expires_at)) is None  # not B's
    assert store.current_turn("s") == again


def test_bad_seal_arguments_are_typed_and_write_nothing(store, store_url, backend, lapse):
    store.create_session("s")
    _dead_turn(store, lapse, [ask(), call("c1")])
    before = snapshot(backend, store_url)
    for bad in [lambda: store.seal_turn("s", mode="drop"), lambda: store.seal_turn("s", mode=None)]:
        with pytest.raises(InvalidArgumentError):
            bad()
    with pytest.raises(InvalidArgumentError):
        store.seal_turn("s", lease="not a lease")
    with pytest.raises(SessionNotFoundError):
        store.seal_turn("nope")
    assert snapshot(backend, store_url) == before


def test_a_scoped_view_seals_its_own_sources_turns_only(store, store_url, backend, lapse):
    store.create_session("w", source="web")
    store.create_session("d", source="discord")
    for sid in ("w", "d"):
        _dead_turn(store, lapse, [ask(), call("c1")], sid=sid)
    scoped = SourceScopedStore(store, "discord")
    before = snapshot(backend, store_url)
    with pytest.raises(AccessDeniedError):
        scoped.seal_turn("w")
    assert snapshot(backend, store_url) == before
    assert scoped.seal_turn("d") == 1


# -- keyed turns --------------------------------------------------------------------------


def _completed(store: Store, key: str, messages: list[Message], sid: str = "s", holder: str = "A") -> TurnLease:
    lease = store.open_turn(sid, holder, 30, key=key)
    store.append(sid, messages, turn=lease)
    assert store.close_turn(lease)
    return lease


def test_a_completed_keyed_turn_replays_its_messages_and_writes_nothing(store, store_url, backend):
    store.create_session("s")
    store.append("s", Message("user", "earlier"))
    _completed(store, "K", [ask(), call("c1"), result("c1"), Message("assistant", "12 C")])
    stored = store.transcript("s")[1:]
    before = snapshot(backend, store_url)
    for holder in ("A", "B"):
        with pytest.raises(TurnReplayedError) as caught:
            store.open_turn("s", holder, 30, key="K")
        assert (caught.value.session_id, caught.value.key) == ("s", "K")
        assert "'K'" in str(caught.value)
        assert caught.value.messages == tuple(stored)
    assert snapshot(backend, store_url) == before
    assert store.current_turn("s") is None


def test_a_replay_answers_the_live_copies_a_compaction_carried(store):
    store.create_session("s")
    store.append("s", [Message("user", f"m{i}") for i in range(3)])
    _completed(store, "K", [ask(), Message("assistant", "12 C")])
    compaction = store.acquire_lease("s", "C", 30)
    child = store.commit_compaction(
        compaction, watermark=3, compacted=[Message("user", "summary")], mode="rotate"
    ).child_session_id
    carried = store.transcript(child)[1:]
    assert [m.origin_id is not None for m in carried] == [True, True]
    with pytest.raises(TurnReplayedError) as caught:
        store.open_turn(child, "B", 30, key="K")  # on the continuation: the same conversation
    assert caught.value.messages == tuple(carried)


def test_a_replay_answers_the_archived_originals_a_summary_replaced(store):
    store.create_session("s")
    store.append("s", Message("user", "m0"))
    _completed(store, "K", [ask(), Message("assistant", "12 C")])
    store.append("s", Message("user", "later"))
    compaction = store.acquire_lease("s", "C", 30)
    store.commit_compaction(compaction, watermark=4, compacted=[Message("user", "summary")], mode="in_place")
    originals = [m for m in store.archive("s") if m.seq in (2, 3)]
    assert [m.state for m in originals] == ["compacted", "compacted"]
    with pytest.raises(TurnReplayedError) as caught:
        store.open_turn("s", "B", 30, key="K")
    assert caught.value.messages == tuple(originals)


def test_a_keyed_turn_spanning_a_rotation_replays_from_both_sessions(store):
    store.create_session("s")
    store.append("s", Message("user", "m0"))
    lease = store.open_turn("s", "A", 30, key="K")
    store.append("s", ask(), turn=lease)
    compaction = store.acquire_lease("s", "C", 30)
    child = store.commit_compaction(
        compaction, watermark=1, compacted=[Message("user", "summary")], mode="rotate"
    ).child_session_id
    store.append(child, Message("assistant", "12 C"), turn=lease)
    assert store.close_turn(lease)
    with pytest.raises(TurnReplayedError) as caught:
        store.open_turn(child, "B", 30, key="K")
    assert caught.value.messages == tuple(store.transcript(child)[1:])
    assert [m.content for m in caught.value.messages] == ["what is the weather?", "12 C"]


def test_an_open_keyed_turn_is_held_and_a_dead_one_must_be_sealed(store, store_url, backend, lapse):
    store.create_session("s")
    lease = store.open_turn("s", "A", 30, key="K")
    store.append("s", [ask(), call("c1")], turn=lease)
    before = snapshot(backend, store_url)
    for holder in ("B", "A"):  # live: whoever asks waits, then opens again and replays
        with pytest.raises(TurnHeldError) as caught:
            store.open_turn("s", holder, 30, key="K")
        assert not isinstance(caught.value, DeadTurnError) and caught.value.token == lease.token
    assert snapshot(backend, store_url) == before
    lapse(lease)
    before = snapshot(backend, store_url)
    with pytest.raises(DeadTurnError):
        store.open_turn("s", "B", 30, key="K")
    assert snapshot(backend, store_url) == before
    assert store.seal_turn("s") == 1
    fresh = store.open_turn("s", "B", 30, key="K")  # sealed: the key opens a fresh turn
    assert fresh.token > lease.token
    store.append("s", Message("assistant", "12 C"), turn=fresh)
    assert store.close_turn(fresh)
    with pytest.raises(TurnReplayedError) as caught:
        store.open_turn("s", "A", 30, key="K")
    assert [m.content for m in caught.value.messages] == ["12 C"]  # the fresh turn's


def test_a_key_is_unique_per_conversation(store, store_url, backend):
    store.create_session("s")
    _completed(store, "K", [ask()])
    store.create_session("t")  # another conversation: its own keys
    other = store.open_turn("t", "A", 30, key="K")
    assert store.close_turn(other)
    assert execute(backend, store_url, "SELECT count(*) FROM turn_keys") == [(2,)]
    assert store.delete_session("s") == 1
    assert execute(backend, store_url, "SELECT count(*) FROM turn_keys") == [(1,)]  # erased with its lineage
    store.create_session("s")  # the id again: a new conversation
    fresh = store.open_turn("s", "A", 30, key="K")
    assert fresh.token > other.token


def test_expiry_erases_a_lineages_turn_keys(store, store_url, backend):
    store.create_session("s")
    _completed(store, "K", [ask()])
    assert store.expire(0) == ["s"]
    assert execute(backend, store_url, "SELECT count(*) FROM turn_keys") == [(0,)]


@pytest.mark.parametrize("key", ["", " K", "K ", "a\x00b", "x" * 201, 7])
def test_a_bad_turn_key_is_refused_and_writes_nothing(store, store_url, backend, key):
    store.create_session("s")
    before = snapshot(backend, store_url)
    with pytest.raises(InvalidMessageError):
        store.open_turn("s", "A", 30, key=key)
    assert snapshot(backend, store_url) == before


# -- a close that races a rotation ----------------------------------------------------------


def _gated_commits(url: str, key: int) -> None:
    """Hold every compaction commit at its audit row (the parent's row is locked and
    ended, the child created) while a transaction holds advisory lock ``key``."""
    with pg_connect(url) as conn:
        conn.execute(
            f"CREATE OR REPLACE FUNCTION gate_commit() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN PERFORM pg_advisory_xact_lock_shared({key}); RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER gate_commit BEFORE INSERT ON compactions FOR EACH ROW EXECUTE FUNCTION gate_commit()"
        )


def _waiting_for(url: str, key: int) -> list[int]:
    """The backends waiting for advisory lock ``key`` (a key below 2**32 is its objid)."""
    query = f"SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = {key} AND NOT granted"
    return [pid for (pid,) in execute("postgres", url, query)]


def _blocked_by(url: str, pid: int) -> int:
    """How many backends wait for a lock backend ``pid`` holds."""
    query = f"SELECT count(*) FROM pg_stat_activity WHERE {pid} = ANY(pg_blocking_pids(pid))"
    return execute("postgres", url, query)[0][0]


def test_a_close_racing_a_rotation_releases_the_lease_the_continuation_carries(store, store_url, backend):
    store.create_session("s")
    store.append("s", [Message("user", f"m{i}") for i in range(3)])
    turn = store.open_turn("s", "A", 30)
    store.append("s", ask(), turn=turn)
    compaction = store.acquire_lease("s", "C", 30)

    def rotate() -> str:
        record = store.commit_compaction(compaction, watermark=3, compacted=[Message("user", "sum")], mode="rotate")
        assert record.child_session_id is not None
        return record.child_session_id

    outcome: dict[str, Any] = {}
    if backend == "sqlite":  # one writer at a time: the close comes after the commit
        child = rotate()
        outcome["closed"] = store.close_turn(turn)
    else:
        # the close's UPDATE waits for the row lock of a commit that ends that row and
        # carries the lease to a continuation it cannot see
        key = random.randrange(1, 2**31)
        _gated_commits(store_url, key)
        with pg_connect(store_url) as gate:
            with gate.transaction():
                gate.execute(f"SELECT pg_advisory_xact_lock({key})")
                committing = threading.Thread(target=lambda: outcome.setdefault("child", rotate()))
                committing.start()
                [commit_pid] = wait_for(lambda: _waiting_for(store_url, key))
                closing = threading.Thread(target=lambda: outcome.setdefault("closed", store.close_turn(turn)))
                closing.start()
                wait_for(lambda: _blocked_by(store_url, commit_pid) == 1)
            committing.join(30)
            closing.join(30)
        assert not committing.is_alive() and not closing.is_alive()
        child = outcome["child"]
    assert outcome["closed"] is True
    rows = execute(backend, store_url, f"SELECT turn_holder, turn_token FROM sessions WHERE id = '{child}'")
    assert rows == [(None, turn.token)]  # no lease outlives its turn
    assert store.current_turn(child) is None
    began = time.monotonic()
    taken = store.open_turn(child, "B", 30)  # at once: no lapsed lease to wait out
    assert time.monotonic() - began < 5 and taken.token > turn.token
    assert store.renew_turn(turn, 30) is None
