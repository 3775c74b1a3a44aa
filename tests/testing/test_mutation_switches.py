"""Each commit check of a compaction has a switch of its own (`mutation`): with one turned
off, exactly the refusal it makes is let through, and the others still refuse; ``fencing``
turns all five off. On every backend: the checks live in the one shared commit."""

from __future__ import annotations

import pytest

from actors.testing import mutation
from protocol import InvalidArgumentError, LeaseLostError, Message, SessionEndedError

SUMMARY = Message("user", "[CONTEXT COMPACTION] summary")


def _seed(store, sid: str, n: int = 4) -> None:
    store.create_session(sid)
    store.append(sid, [Message("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(n)])


def _stale_lease(store, sid: str):
    stale = store.acquire_lease(sid, "A", 30)
    store.release_lease(stale)
    store.acquire_lease(sid, "B", 30)
    return stale


def test_fence_alone_lets_a_stale_token_commit(store):
    _seed(store, "s")
    stale = _stale_lease(store, "s")
    with mutation("ended", "watermark", "snapshot", "parent_open"), pytest.raises(LeaseLostError):
        store.commit_compaction(stale, watermark=4, compacted=[SUMMARY], mode="in_place")
    with mutation("fence"):
        record = store.commit_compaction(stale, watermark=4, compacted=[SUMMARY], mode="in_place")
    assert record.token == stale.token


def test_ended_alone_lets_a_commit_into_an_ended_session(store):
    _seed(store, "s")
    store.end_session("s", "user_exit")
    lease = store.acquire_lease("s", "A", 30)
    with mutation("fence", "watermark", "snapshot", "parent_open"), pytest.raises(SessionEndedError):
        store.commit_compaction(lease, watermark=4, compacted=[SUMMARY], mode="in_place")
    with mutation("ended"):
        assert store.commit_compaction(lease, watermark=4, compacted=[SUMMARY], mode="in_place").watermark == 4


def test_watermark_alone_lets_a_snapshot_past_the_last_message(store):
    _seed(store, "s")
    lease = store.acquire_lease("s", "A", 30)
    with mutation("fence", "ended", "snapshot", "parent_open"), pytest.raises(InvalidArgumentError):
        store.commit_compaction(lease, watermark=9, compacted=[SUMMARY], mode="in_place")
    with mutation("watermark"):
        assert store.commit_compaction(lease, watermark=9, compacted=[SUMMARY], mode="in_place").watermark == 9


def test_fencing_turns_every_commit_check_off(store):
    _seed(store, "s")
    stale = _stale_lease(store, "s")
    store.end_session("s", "user_exit")
    with mutation("fencing"):
        assert store.commit_compaction(stale, watermark=9, compacted=[SUMMARY], mode="in_place").watermark == 9


def test_an_unknown_switch_is_refused():
    with pytest.raises(InvalidArgumentError), mutation("fense"):
        pass
