"""Contract: a `SourceScopedStore` reaches one source's sessions and refuses the rest,
writing nothing for a refusal."""

from __future__ import annotations

import pytest

from persistence import SourceScopedStore
from protocol import AccessDeniedError, Message
from tests.persistence.contract.db import snapshot


@pytest.fixture
def scoped(store):
    store.create_session("w", source="web")
    store.append("w", [Message("user", "web secret"), Message("assistant", "web answer")])
    store.create_session("d", source="discord")
    store.append("d", [Message("user", "discord hello"), Message("assistant", "discord reply")])
    return SourceScopedStore(store, "discord")


def test_its_own_source_works_as_the_store_does(scoped, store):
    assert [s.id for s in scoped.sessions()] == ["d"]
    assert scoped.create_session("d2").source == "discord"
    assert [info.source for info in scoped.create_sessions(["d4", "d5"])] == ["discord", "discord"]
    [stored] = scoped.append("d2", Message("user", "new"))
    assert scoped.transcript("d2") == [stored] == store.transcript("d2")
    assert [h.session_id for h in scoped.search("secret")] == [] and scoped.search("hello")[0].session_id == "d"
    lease = scoped.acquire_lease("d", "A", 30)
    record = scoped.commit_compaction(lease, watermark=2, compacted=[Message("user", "sum")], mode="in_place")
    assert scoped.compaction_detail(record.id).record == record
    assert [x.session_id for x in scoped.leases()] == ["d"]
    turn = scoped.open_turn("d2", "gw", 30)
    assert [t.session_id for t in scoped.turns()] == ["d2"]
    assert scoped.close_turn(turn)
    assert scoped.branch("d", 3, "d3").source == "discord"
    assert scoped.delete_session("d3") == 1


def _refusals(store):
    lease = store.acquire_lease("w", "A", 30)
    turn = store.open_turn("w", "gw", 30)
    record = store.commit_compaction(
        store.acquire_lease("w", "A", 30), watermark=2, compacted=[Message("user", "web sum")], mode="in_place"
    )
    return lease, turn, record


def test_every_read_and_write_of_another_source_is_refused_and_writes_nothing(scoped, store, store_url, backend):
    lease, turn, record = _refusals(store)
    calls = [
        lambda s: s.get_session("w"),
        lambda s: s.transcript("w"),
        lambda s: s.archive("w"),
        lambda s: s.append("w", Message("user", "sneak")),
        lambda s: s.retract("w"),
        lambda s: s.update_metadata("w", {"x": 1}),
        lambda s: s.end_session("w", "closed"),
        lambda s: s.delete_session("w"),
        lambda s: s.resolve("w"),
        lambda s: s.children("w"),
        lambda s: s.compactions("w"),
        lambda s: s.compaction_detail(record.id),
        lambda s: s.branch("w", 3, "stolen"),
        lambda s: s.search("web", session_id="w"),
        lambda s: s.search("web", source="web"),
        lambda s: s.usage("w"),
        lambda s: s.usage(source="web"),
        lambda s: s.sessions(source="web"),
        lambda s: s.expire(0, source="web"),
        lambda s: s.create_session("x", source="web"),
        lambda s: s.create_sessions(["x", "y"], source="web"),
        lambda s: s.prune_archive(older_than_s=0),
        lambda s: s.prune_archive(older_than_s=0, session_id="w"),
        lambda s: s.acquire_lease("w", "B", 30),
        lambda s: s.renew_lease(lease, 30),
        lambda s: s.release_lease(lease),
        lambda s: s.reap_leases(),
        lambda s: s.current_lease("w"),
        lambda s: s.open_turn("w", "gw2", 30),
        lambda s: s.renew_turn(turn, 30),
        lambda s: s.close_turn(turn),
        lambda s: s.interrupt_turn("w"),
        lambda s: s.current_turn("w"),
        lambda s: s.cooldown("w"),
        lambda s: s.arm_cooldown("w", 60, "x"),
        lambda s: s.clear_cooldown("w"),
        lambda s: s.commit_compaction(lease, watermark=3, compacted=[Message("user", "s")], mode="in_place"),
    ]
    before = snapshot(backend, store_url)
    for n, call in enumerate(calls):
        with pytest.raises(AccessDeniedError):
            call(scoped)
        assert snapshot(backend, store_url) == before, n
    assert scoped.leases() == [] and scoped.turns() == []  # another source's: not listed
    assert scoped.expire(0) == ["d"]  # its own source only
    assert [s.id for s in store.sessions()] == ["w"]
