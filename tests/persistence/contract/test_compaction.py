"""Contract: fenced, lossless compaction in place and by rotation."""

from __future__ import annotations

import pytest

from protocol import (
    END_REASON_COMPRESSION,
    InvalidArgumentError,
    LeaseLostError,
    Message,
    SessionEndedError,
    SessionExistsError,
    transcripts_equal,
)
from tests.persistence.contract.db import snapshot, wait_for

SUMMARY = Message("user", "[CONTEXT COMPACTION] summary of the start")


def _seed(store, sid: str, n: int) -> list:
    store.create_session(sid, source="telegram")
    return store.append(sid, [Message("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(n)])


def test_in_place_keeps_tail_after_compacted_set(store):
    original = _seed(store, "s", 6)
    lease = store.acquire_lease("s", "A", 30)
    watermark = original[-1].seq
    # the tail: appended while the summary was being written
    tail = store.append("s", [Message("user", "late question"), Message("assistant", "late answer")])
    record = store.commit_compaction(
        lease, watermark=watermark, compacted=[SUMMARY], mode="in_place", compressor="test"
    )
    live = store.transcript("s")
    assert transcripts_equal(live, [SUMMARY, *tail])
    assert [m.seq for m in live] == [9, 10, 11]  # continue from max(seq) + 1
    assert [m.origin_id for m in live] == [None, tail[0].id, tail[1].id]
    archive = store.archive("s")
    assert [m.id for m in archive] == [m.id for m in [*original, *tail]]
    assert [m.state for m in archive] == ["compacted"] * 6 + ["superseded"] * 2
    assert (record.session_id, record.child_session_id, record.mode) == ("s", None, "in_place")
    assert (record.token, record.holder, record.watermark) == (lease.token, "A", watermark)
    assert (record.archived_count, record.tail_count, record.compressor) == (6, 2, "test")
    assert record.started_at == lease.acquired_at and record.committed_at >= lease.acquired_at
    assert store.compactions("s") == [record]
    assert store.get_session("s").epoch == 1
    # appends after the commit continue the seqs
    assert store.append("s", Message("assistant", "after"))[0].seq == 12


def test_every_acknowledged_append_is_accounted_for(store):
    acked = _seed(store, "s", 4)
    for round_no in range(3):
        lease = store.acquire_lease("s", "A", 30)
        watermark = store.transcript("s")[-1].seq
        acked += store.append("s", Message("user", f"tail {round_no}"))
        store.commit_compaction(
            lease, watermark=watermark, compacted=[SUMMARY, Message("assistant", "ok")], mode="in_place"
        )
        store.release_lease(lease)
        acked += store.append("s", Message("assistant", f"after {round_no}"))
    rows = {m.id: m for m in store.transcript("s") + store.archive("s")}
    assert all(m.id in rows for m in acked)
    # each acknowledged message survives live, either itself or as a carried copy
    live = store.transcript("s")
    carried = {m.origin_id for m in live}
    seqs = sorted(m.seq for m in rows.values())
    assert seqs == list(range(1, len(seqs) + 1))
    assert acked[-1].id in {m.id for m in live}
    assert any(o is not None for o in carried)
    assert store.get_session("s").epoch == 3


def test_rotate_creates_one_continuation(store):
    original = _seed(store, "p", 4)
    lease = store.acquire_lease("p", "A", 30)
    tail = store.append("p", Message("user", "tail"))
    record = store.commit_compaction(lease, watermark=original[-1].seq, compacted=[SUMMARY], mode="rotate")
    child_id = record.child_session_id
    assert child_id and child_id != "p" and len(child_id) <= 128
    parent = store.get_session("p")
    assert (parent.end_reason, parent.epoch) == (END_REASON_COMPRESSION, 1) and parent.ended_at is not None
    child = store.get_session(child_id)
    assert (child.parent_session_id, child.source, child.epoch, child.live) == ("p", "telegram", 0, True)
    assert store.transcript("p") == []
    assert [m.id for m in store.archive("p")] == [m.id for m in [*original, *tail]]
    live = store.transcript(child_id)
    assert transcripts_equal(live, [SUMMARY, *tail])
    assert [m.seq for m in live] == [1, 2] and live[1].origin_id == tail[0].id
    assert store.resolve("p") == child_id
    assert [c.id for c in store.children("p")] == [child_id]
    with pytest.raises(SessionEndedError) as caught:
        store.append("p", Message("user", "late"))
    assert caught.value.successor_id == child_id


def test_rotate_with_explicit_child_and_taken_child(store, store_url, backend):
    _seed(store, "p", 3)
    store.create_session("taken")
    lease = store.acquire_lease("p", "A", 30)
    before = snapshot(backend, store_url)
    with pytest.raises(SessionExistsError):
        store.commit_compaction(lease, watermark=3, compacted=[SUMMARY], mode="rotate", child_session_id="taken")
    assert snapshot(backend, store_url) == before
    record = store.commit_compaction(lease, watermark=3, compacted=[SUMMARY], mode="rotate", child_session_id="next")
    assert record.child_session_id == "next" and store.resolve("p") == "next"


def test_derived_child_id_of_a_long_id_fits(store):
    long_id = "L" * 128
    _seed(store, long_id, 2)
    for _ in range(2):
        current = store.resolve(long_id)
        lease = store.acquire_lease(current, "A", 30)
        record = store.commit_compaction(lease, watermark=1, compacted=[SUMMARY], mode="rotate")
        assert 1 <= len(record.child_session_id) <= 128
    assert len({long_id, *(c.id for c in store.sessions())}) == 3


def test_stale_token_commit_is_fenced_and_writes_nothing(store, store_url, backend):
    _seed(store, "s", 4)
    stale = store.acquire_lease("s", "A", 30)
    store.release_lease(stale)
    current = store.acquire_lease("s", "B", 30)
    before = snapshot(backend, store_url)
    for mode in ("in_place", "rotate"):
        with pytest.raises(LeaseLostError) as caught:
            store.commit_compaction(stale, watermark=4, compacted=[SUMMARY], mode=mode)
        assert (caught.value.session_id, caught.value.token) == ("s", stale.token)
    assert snapshot(backend, store_url) == before
    assert store.commit_compaction(current, watermark=4, compacted=[SUMMARY], mode="in_place").token == current.token


def test_expired_lease_commit_is_fenced(store, store_url, backend):
    _seed(store, "s", 3)
    lease = store.acquire_lease("s", "A", 0.3)
    wait_for(lambda: store.current_lease("s") is None)
    before = snapshot(backend, store_url)
    with pytest.raises(LeaseLostError):
        store.commit_compaction(lease, watermark=3, compacted=[SUMMARY], mode="rotate")
    assert snapshot(backend, store_url) == before


def test_commit_on_ended_session_writes_nothing(store, store_url, backend):
    _seed(store, "s", 3)
    store.end_session("s", "user_exit")
    lease = store.acquire_lease("s", "A", 30)
    before = snapshot(backend, store_url)
    for mode in ("in_place", "rotate"):
        with pytest.raises(SessionEndedError):
            store.commit_compaction(lease, watermark=3, compacted=[SUMMARY], mode=mode)
    assert snapshot(backend, store_url) == before


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "sideways"},
        {"watermark": "3"},
        {"watermark": -1},
        {"watermark": 2.5},
        {"watermark": True},
        {"compacted": []},
        {"compacted": ["not a message"]},
        {"compacted": SUMMARY},
        {"child_session_id": " bad"},
        {"watermark": 4},  # past the last seq: names messages that do not exist
        {"watermark": 4, "mode": "in_place"},
    ],
    ids=repr,
)
def test_bad_compaction_arguments_write_nothing(store, store_url, backend, kwargs):
    _seed(store, "s", 3)
    lease = store.acquire_lease("s", "A", 30)
    before = snapshot(backend, store_url)
    args = {"watermark": 3, "compacted": [SUMMARY], "mode": "rotate", **kwargs}
    with pytest.raises(ValueError):  # InvalidArgumentError / InvalidMessageError / InvalidSessionIdError
        store.commit_compaction(lease, **args)
    assert snapshot(backend, store_url) == before
    with pytest.raises(InvalidArgumentError):
        store.commit_compaction("not a lease", watermark=3, compacted=[SUMMARY], mode="in_place")  # type: ignore[arg-type]


def test_second_rotation_of_same_parent_is_refused(store):
    _seed(store, "p", 3)
    first = store.acquire_lease("p", "A", 30)
    store.commit_compaction(first, watermark=3, compacted=[SUMMARY], mode="rotate")
    store.release_lease(first)
    late = store.acquire_lease("p", "B", 30)  # a path that still believes in the parent
    with pytest.raises(SessionEndedError) as caught:
        store.commit_compaction(late, watermark=3, compacted=[SUMMARY], mode="rotate")
    assert caught.value.successor_id == store.resolve("p")
    assert len(store.children("p")) == 1
