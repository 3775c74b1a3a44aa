"""Contract: session lifecycle, listing, lineage and successor resolution."""

from __future__ import annotations

import pytest

from protocol import (
    END_REASON_COMPRESSION,
    InvalidArgumentError,
    InvalidLineageError,
    InvalidSessionIdError,
    LineageForkedError,
    Message,
    SessionEndedError,
    SessionExistsError,
)
from tests.persistence.contract.db import snapshot


def test_create_get_and_duplicate(store, store_url, backend):
    info = store.create_session("s1", source="discord")
    assert (info.id, info.source, info.parent_session_id, info.epoch) == ("s1", "discord", None, 0)
    assert info.ended_at is None and info.end_reason is None and info.live
    assert store.get_session("s1") == info
    before = snapshot(backend, store_url)
    with pytest.raises(SessionExistsError) as caught:
        store.create_session("s1", source="other")
    assert caught.value.session_id == "s1"
    assert snapshot(backend, store_url) == before


def test_end_session_idempotent_same_reason_only(store):
    store.create_session("s1")
    ended = store.end_session("s1", "user_exit")
    assert ended.end_reason == "user_exit" and ended.ended_at is not None and not ended.live
    assert store.end_session("s1", "user_exit") == ended
    with pytest.raises(SessionEndedError) as caught:
        store.end_session("s1", "timeout")
    assert caught.value.end_reason == "user_exit"
    assert store.get_session("s1").end_reason == "user_exit"
    with pytest.raises(InvalidArgumentError):
        store.end_session("s1", "")


def test_continuation_requires_compression_ended_parent(store, store_url, backend):
    store.create_session("open")
    store.create_session("quit")
    store.end_session("quit", "user_exit")
    before = snapshot(backend, store_url)
    for parent in ("open", "quit"):
        with pytest.raises(InvalidLineageError) as caught:
            store.create_session("child", parent_session_id=parent)
        assert isinstance(caught.value, ValueError)
    assert snapshot(backend, store_url) == before
    store.create_session("done")
    store.end_session("done", END_REASON_COMPRESSION)
    child = store.create_session("child", parent_session_id="done", source="web")
    assert child.parent_session_id == "done"
    assert [c.id for c in store.children("done")] == ["child"]
    assert store.children("child") == []


def test_sessions_newest_first_with_filters(store):
    for sid in ("s1", "s2", "s3", "s4"):
        store.create_session(sid)
    store.end_session("s2", "done")
    assert [s.id for s in store.sessions()] == ["s4", "s3", "s2", "s1"]
    assert [s.id for s in store.sessions(live=True)] == ["s4", "s3", "s1"]
    assert [s.id for s in store.sessions(live=False)] == ["s2"]
    assert [s.id for s in store.sessions(limit=2)] == ["s4", "s3"]
    for bad in (0, -1, 2**31, 2**63, True, 1.5, "2"):  # None = all, else 1 .. 2**31 - 1
        with pytest.raises(InvalidArgumentError):
            store.sessions(limit=bad)


def _rotate_by_hand(store, parent: str, child: str) -> None:
    store.end_session(parent, END_REASON_COMPRESSION)
    store.create_session(child, parent_session_id=parent)


def test_resolve_follows_several_hops(store):
    store.create_session("g0")
    _rotate_by_hand(store, "g0", "g1")
    _rotate_by_hand(store, "g1", "g2")
    _rotate_by_hand(store, "g2", "g3")
    for sid in ("g0", "g1", "g2", "g3"):
        assert store.resolve(sid) == "g3"
    store.end_session("g3", END_REASON_COMPRESSION)  # ended by compression, no child yet
    assert store.resolve("g0") == "g3"
    store.create_session("other")
    store.end_session("other", "user_exit")
    assert store.resolve("other") == "other"


def test_append_to_ended_session_names_live_successor(store, store_url, backend):
    store.create_session("p")
    store.append("p", Message("user", "before"))
    _rotate_by_hand(store, "p", "c1")
    _rotate_by_hand(store, "c1", "c2")
    before = snapshot(backend, store_url)
    with pytest.raises(SessionEndedError) as caught:
        store.append("p", Message("user", "late"))
    err = caught.value
    assert (err.session_id, err.successor_id, err.end_reason) == ("p", "c2", END_REASON_COMPRESSION)
    assert snapshot(backend, store_url) == before
    store.create_session("quit")
    store.end_session("quit", "user_exit")
    with pytest.raises(SessionEndedError) as caught:
        store.append("quit", Message("user", "late"))
    assert caught.value.successor_id is None and caught.value.end_reason == "user_exit"
    store.create_session("lonely")
    store.end_session("lonely", END_REASON_COMPRESSION)
    with pytest.raises(SessionEndedError) as caught:
        store.append("lonely", Message("user", "late"))
    assert caught.value.successor_id is None


def test_an_ended_tip_is_not_a_live_successor(store):
    store.create_session("p")
    store.append("p", Message("user", "before"))
    _rotate_by_hand(store, "p", "c1")
    store.end_session("c1", "user_closed")  # the continuation itself ended for another reason
    assert store.resolve("p") == "c1"
    with pytest.raises(SessionEndedError) as caught:
        store.append("p", Message("user", "late"))
    assert caught.value.successor_id is None


def test_hand_made_fork_is_detected(store):
    store.create_session("p")
    store.end_session("p", END_REASON_COMPRESSION)
    store.create_session("a", parent_session_id="p")
    store.create_session("b", parent_session_id="p")
    with pytest.raises(LineageForkedError) as caught:
        store.resolve("p")
    assert caught.value.session_id == "p" and sorted(caught.value.children) == ["a", "b"]
    # a forked lineage names no successor
    with pytest.raises(SessionEndedError) as ended:
        store.append("p", Message("user", "x"))
    assert ended.value.successor_id is None
    assert store.resolve("a") == "a"  # the children themselves are tips
    assert [c.id for c in store.children("p")] == ["a", "b"]


# -- many at once ------------------------------------------------------------------------


def test_create_sessions_creates_them_all_in_one_call(store):
    ids = [f"bulk-{n}" for n in (3, 1, 2, 10)]
    created = store.create_sessions(ids, source="import", metadata={"batch": 7})
    assert [info.id for info in created] == ids  # in the order given
    assert all(info.source == "import" and info.metadata == {"batch": 7} and info.live for info in created)
    assert len({info.incarnation for info in created}) == len(ids)  # each a conversation of its own
    assert [store.get_session(sid) for sid in ids] == created
    store.append("bulk-2", Message("user", "hi"))
    assert [m.content for m in store.transcript("bulk-2")] == ["hi"]
    assert store.create_sessions([]) == []


@pytest.mark.parametrize("taken", ["existing", "twice"])
def test_create_sessions_writes_nothing_when_one_id_is_taken(store, store_url, backend, taken):
    store.create_session("old")
    before = snapshot(backend, store_url)
    ids = ["a", "old", "b"] if taken == "existing" else ["a", "b", "a"]
    with pytest.raises(SessionExistsError) as caught:
        store.create_sessions(ids)
    assert caught.value.session_id == ("old" if taken == "existing" else "a")
    assert snapshot(backend, store_url) == before


@pytest.mark.parametrize("bad", ["abc", ["ok", ""], ["ok", 5], None, {"a": 1}])
def test_create_sessions_refuses_bad_ids_and_writes_nothing(store, store_url, backend, bad):
    before = snapshot(backend, store_url)
    with pytest.raises((InvalidArgumentError, InvalidSessionIdError)):
        store.create_sessions(bad)
    assert snapshot(backend, store_url) == before


def test_overlapping_create_sessions_calls_create_one_set_whole(store):
    """Two callers race for a shared id: one call creates every one of its ids, the
    other none of its own."""
    import threading

    start = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def create(name: str) -> None:
        ids = [f"{name}-{n}" for n in range(200)] + ["shared"]
        start.wait(timeout=10)
        try:
            outcomes[name] = store.create_sessions(ids)
        except SessionExistsError as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=create, args=(name,)) for name in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    failed = [name for name, outcome in outcomes.items() if isinstance(outcome, SessionExistsError)]
    assert len(outcomes) == 2 and len(failed) == 1
    winner = "right" if failed == ["left"] else "left"
    names = {info.id for info in store.sessions()}
    assert names == {f"{winner}-{n}" for n in range(200)} | {"shared"}
