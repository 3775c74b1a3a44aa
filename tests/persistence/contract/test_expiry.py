"""Contract: expiry erases whole lineages idle long enough, and nothing else."""

from __future__ import annotations

import pytest

from protocol import InvalidArgumentError, Message
from tests.persistence.contract.db import execute, snapshot

DAY = 86400.0


def _age(backend, url, ids, seconds):
    """Make these sessions and their messages ``seconds`` older (what waiting would do)."""
    listed = ", ".join(f"'{i}'" for i in ids)
    execute(backend, url, f"UPDATE sessions SET created_at = created_at - {seconds} WHERE id IN ({listed})")
    execute(backend, url, f"UPDATE messages SET created_at = created_at - {seconds} WHERE session_id IN ({listed})")


def _rotated(store, sid, source="api", metadata=None):
    store.create_session(sid, source=source, metadata=metadata)
    first = store.append(sid, [Message("user", "u"), Message("assistant", "a")])
    lease = store.acquire_lease(sid, "A", 30)
    record = store.commit_compaction(lease, watermark=first[-1].seq, compacted=[Message("user", "s")], mode="rotate")
    store.release_lease(lease)
    return [sid, record.child_session_id]


def test_idle_lineages_are_erased_whole_and_recent_ones_kept(store, store_url, backend):
    old = _rotated(store, "old", source="web")
    store.create_session("quiet", source="web")  # no message at all
    _age(backend, store_url, [*old, "quiet"], 10 * DAY)
    _rotated(store, "recent", source="web")
    store.create_session("touched", source="web")
    _age(backend, store_url, ["touched"], 10 * DAY)
    store.append("touched", Message("user", "just now"))  # a new message is activity

    before = snapshot(backend, store_url)
    assert store.expire(7 * DAY, dry_run=True) == ["old", "quiet"]
    assert snapshot(backend, store_url) == before  # a dry run erases nothing
    assert store.expire(7 * DAY) == ["old", "quiet"]
    assert {s.id for s in store.sessions()} == {"recent", store.resolve("recent"), "touched"}
    assert execute(backend, store_url, "SELECT count(*) FROM messages WHERE session_id LIKE 'old%'") == [(0,)]
    assert store.expire(7 * DAY) == []
    assert store.expire(0) == sorted(["recent", "touched"])  # 0: idle since now
    assert store.sessions() == []


def test_filters_on_source_and_the_live_tips_metadata(store, store_url, backend):
    web = _rotated(store, "w", source="web", metadata={"tier": "free"})
    store.update_metadata(web[1], {"tier": "gold"})  # the tip's metadata decides
    store.create_session("d", source="discord", metadata={"tier": "gold"})
    store.create_session("f", source="web", metadata={"tier": "free"})
    _age(backend, store_url, [*web, "d", "f"], 2 * DAY)
    assert store.expire(DAY, source="discord", dry_run=True) == ["d"]
    assert store.expire(DAY, metadata={"tier": "gold"}, dry_run=True) == ["d", "w"]
    assert store.expire(DAY, source="web", metadata={"tier": "free"}) == ["f"]
    assert sorted(s.id for s in store.sessions()) == sorted(["d", *web])


def test_a_live_turn_or_compaction_lease_keeps_a_lineage(store, store_url, backend):
    for sid in ("turning", "compacting", "idle"):
        store.create_session(sid)
        store.append(sid, Message("user", "x"))
    turn = store.open_turn("turning", "gateway", 60)
    lease = store.acquire_lease("compacting", "A", 60)
    _age(backend, store_url, ["turning", "compacting", "idle"], 2 * DAY)
    assert store.expire(DAY) == ["idle"]
    store.close_turn(turn)
    store.release_lease(lease)
    assert store.expire(DAY) == ["compacting", "turning"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"idle_for_s": -1},
        {"idle_for_s": float("inf")},
        {"idle_for_s": "7d"},
        {"idle_for_s": True},
        {"idle_for_s": 1, "source": ""},
        {"idle_for_s": 1, "metadata": {"k": [1]}},
        {"idle_for_s": 1, "dry_run": "yes"},
    ],
)
def test_bad_expiry_arguments_are_typed_and_erase_nothing(store, store_url, backend, kwargs):
    store.create_session("s")
    _age(backend, store_url, ["s"], DAY)
    before = snapshot(backend, store_url)
    kwargs = dict(kwargs)
    with pytest.raises(InvalidArgumentError):
        store.expire(kwargs.pop("idle_for_s"), **kwargs)
    assert snapshot(backend, store_url) == before


def test_an_append_between_the_look_up_and_the_erasure_keeps_the_lineage(store, store_url, backend, monkeypatch):
    for sid in ("late", "gone"):
        store.create_session(sid, metadata={"k": 1})
    _age(backend, store_url, ["late", "gone"], 2 * DAY)
    real = store.sessions

    def sessions_then_an_append(**filters):  # runs after the idle look-up, before any erasure
        store.append("late", Message("user", "I am back"))
        return real(**filters)

    monkeypatch.setattr(store, "sessions", sessions_then_an_append)
    assert store.expire(DAY, metadata={"k": 1}) == ["gone"]
    assert [m.content for m in store.transcript("late")] == ["I am back"]
