"""Contract: incarnations. A lineage erased and started again under the same id is
another conversation: a write that names the old one's incarnation is refused
inside the write, and writes nothing."""

from __future__ import annotations

import threading

import pytest

from protocol import InvalidArgumentError, Message, SessionNotFoundError
from tests.persistence.contract.db import execute, snapshot

pytestmark = pytest.mark.timeout(60)


def _started_again(store, sid: str) -> tuple[str, str]:
    """Create ``sid``, erase it, create it again: (old incarnation, new incarnation)."""
    old = store.create_session(sid).incarnation
    store.append(sid, Message("user", "first conversation"))
    store.delete_session(sid)
    new = store.create_session(sid).incarnation
    store.append(sid, Message("user", "second conversation"))
    return old, new


def test_each_new_lineage_gets_its_own_incarnation(store):
    a, b = store.create_session("a"), store.create_session("b")
    assert a.incarnation and b.incarnation and a.incarnation != b.incarnation
    assert store.get_session("a").incarnation == a.incarnation
    assert {s.id: s.incarnation for s in store.sessions()} == {"a": a.incarnation, "b": b.incarnation}


def test_continuations_share_the_lineage_incarnation(store):
    root = store.create_session("r")
    store.append("r", [Message("user", "u1"), Message("assistant", "a1")])
    lease = store.acquire_lease("r", "h", 30)
    record = store.commit_compaction(lease, watermark=1, compacted=[Message("user", "sum")], mode="rotate")
    child = store.get_session(record.child_session_id)
    assert child.incarnation == root.incarnation
    assert [s.incarnation for s in store.children("r")] == [root.incarnation]
    store.end_session(child.id, "compression")
    manual = store.create_session("r-next", parent_session_id=child.id)
    assert manual.incarnation == root.incarnation


def test_an_append_meant_for_an_erased_lineage_is_refused_and_writes_nothing(store):
    old, new = _started_again(store, "s")
    assert old != new
    with pytest.raises(SessionNotFoundError):
        store.append("s", Message("user", "stale write"), incarnation=old)
    with pytest.raises(SessionNotFoundError):
        store.append("s", [], incarnation=old)
    [stored] = store.append("s", Message("assistant", "reply"), incarnation=new)
    assert stored.seq == 2  # the refused append took no seq
    assert [m.content for m in store.transcript("s")] == ["second conversation", "reply"]
    assert store.append("s", Message("user", "any"))[0].seq == 3  # None: whichever it names now


def test_a_retraction_meant_for_an_erased_lineage_is_refused(store):
    old, new = _started_again(store, "s")
    with pytest.raises(SessionNotFoundError):
        store.retract("s", incarnation=old)
    assert [m.content for m in store.transcript("s")] == ["second conversation"]
    assert store.retract("s", incarnation=new).content == "second conversation"


def test_a_read_meant_for_an_erased_lineage_is_refused(store):
    """A reader naming the old conversation never gets the new one's messages."""
    old, new = _started_again(store, "s")
    for read in (store.transcript, store.archive):
        with pytest.raises(SessionNotFoundError):
            read("s", incarnation=old)
    assert [m.content for m in store.transcript("s", incarnation=new)] == ["second conversation"]
    assert store.archive("s", incarnation=new) == []
    assert [m.content for m in store.transcript("s")] == ["second conversation"]  # None: any


def test_a_batch_of_appends_refuses_only_the_stale_ones(store):
    """Many callers at once (the writers batch them): the stale incarnation fails
    alone; every other append commits, in one group commit or several."""
    old, new = _started_again(store, "s")
    store.create_session("other")
    callers = 24
    barrier = threading.Barrier(callers)
    outcomes: dict[int, object] = {}

    def call(i: int) -> None:
        barrier.wait()
        sid, incarnation = [("s", old), ("s", new), ("other", None)][i % 3]
        try:
            outcomes[i] = store.append(sid, Message("user", f"m{i}"), incarnation=incarnation)[0].seq
        except SessionNotFoundError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(outcomes) == callers
    stale = [outcomes[i] for i in range(0, callers, 3)]
    assert all(isinstance(o, SessionNotFoundError) for o in stale)
    assert sorted(outcomes[i] for i in range(1, callers, 3)) == list(range(2, 2 + callers // 3))
    assert sorted(outcomes[i] for i in range(2, callers, 3)) == list(range(1, 1 + callers // 3))
    assert len(store.transcript("s")) == 1 + callers // 3


@pytest.mark.parametrize("bad", [7, b"x", "x" * 65])
def test_a_bad_incarnation_is_an_invalid_argument_and_writes_nothing(store, bad):
    store.create_session("s")
    with pytest.raises(InvalidArgumentError):
        store.append("s", Message("user", "x"), incarnation=bad)
    with pytest.raises(InvalidArgumentError):
        store.retract("s", incarnation=bad)
    for read in (store.transcript, store.archive):
        with pytest.raises(InvalidArgumentError):
            read("s", incarnation=bad)
    assert store.transcript("s") == []


def test_sessions_from_before_incarnations_share_the_empty_one(store, store_url, backend):
    """Rows migrated from schema version 2 carry "" (the column's default): writes
    naming "" reach them, and a lineage started again gets a real token."""
    store.create_session("legacy")
    execute(backend, store_url, "UPDATE sessions SET incarnation = '' WHERE id = 'legacy'")
    assert store.get_session("legacy").incarnation == ""
    assert store.append("legacy", Message("user", "kept"), incarnation="")[0].seq == 1
    store.delete_session("legacy")
    assert store.create_session("legacy").incarnation != ""
    with pytest.raises(SessionNotFoundError):
        store.append("legacy", Message("user", "stale"), incarnation="")


def test_commit_and_cooldown_name_the_conversation_they_mean(store, store_url, backend):
    from protocol import Message, SessionNotFoundError

    store.create_session("s")
    store.append("s", [Message("user", "old a"), Message("assistant", "old b")])
    old = store.get_session("s").incarnation
    stale = store.acquire_lease("s", "A", 30)
    store.delete_session("s")  # erased by another process, then the id used again
    store.create_session("s")
    store.append("s", [Message("user", "new a"), Message("assistant", "new b")])
    fresh = store.acquire_lease("s", "A", 30)
    assert fresh.token > stale.token  # tokens never restart with the id...
    before = snapshot(backend, store_url)
    with pytest.raises(SessionNotFoundError):  # ...and the commit checks the conversation itself
        store.commit_compaction(
            fresh, watermark=2, compacted=[Message("user", "summary of the old")], mode="in_place", incarnation=old
        )
    with pytest.raises(SessionNotFoundError):
        store.arm_cooldown("s", 600, "the old attempt failed", incarnation=old)
    assert snapshot(backend, store_url) == before
    new = store.get_session("s").incarnation
    record = store.commit_compaction(
        fresh, watermark=2, compacted=[Message("user", "summary")], mode="in_place", incarnation=new
    )
    assert record.token == fresh.token and store.arm_cooldown("s", 1, "x", incarnation=new).error == "x"
