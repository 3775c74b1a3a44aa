"""Contract: the data lifecycle — erasure, retraction, archive retention."""

from __future__ import annotations

import pytest

from protocol import (
    END_REASON_COMPRESSION,
    Cooldown,
    InvalidArgumentError,
    InvalidSessionIdError,
    LeaseLostError,
    Message,
    SessionEndedError,
    SessionNotFoundError,
    SnapshotRetractedError,
)
from tests.persistence.contract.db import execute, snapshot

DAY = 86400.0


def _conversation(store, sid: str, n: int) -> None:
    store.create_session(sid)
    store.append(sid, [Message("user" if i % 2 == 0 else "assistant", f"{sid}-{i}") for i in range(n)])


def _rotate(store, sid: str, summary: str = "summary") -> str:
    lease = store.acquire_lease(sid, "h", 30)
    last = store.transcript(sid)[-1].seq
    record = store.commit_compaction(lease, watermark=last, compacted=[Message("user", summary)], mode="rotate")
    store.release_lease(lease)
    return record.child_session_id


def _rows_of(backend, url, ids) -> dict[str, int]:
    """How many rows of each table still mention any of ``ids``."""
    listed = ", ".join("'" + i.replace("'", "''") + "'" for i in ids)
    queries = {
        "sessions": f"SELECT count(*) FROM sessions WHERE id IN ({listed})",
        "messages": f"SELECT count(*) FROM messages WHERE session_id IN ({listed})",
        "leases": f"SELECT count(*) FROM leases WHERE session_id IN ({listed})",
        "cooldowns": f"SELECT count(*) FROM cooldowns WHERE session_id IN ({listed})",
        "compactions": f"SELECT count(*) FROM compactions WHERE session_id IN ({listed})"
        f" OR child_session_id IN ({listed})",
    }
    return {table: execute(backend, url, sql)[0][0] for table, sql in queries.items()}


# -- delete_session ----------------------------------------------------------------


def test_delete_erases_the_whole_lineage_and_nothing_else(store, store_url, backend):
    _conversation(store, "root", 4)
    child = _rotate(store, "root")
    store.append(child, Message("user", "after rotation"))
    grandchild = _rotate(store, child)
    store.retract(grandchild)
    store.arm_cooldown(grandchild, 60, "boom")
    store.acquire_lease(grandchild, "someone", 30)
    _conversation(store, "bystander", 3)
    others = snapshot(backend, store_url)
    lineage = ["root", child, grandchild]
    total = sum(len(store.transcript(s)) + len(store.archive(s)) for s in lineage)
    assert store.delete_session(child) == total  # any member names the lineage
    assert _rows_of(backend, store_url, lineage) == dict.fromkeys(
        ("sessions", "messages", "leases", "cooldowns", "compactions"), 0
    )
    for sid in lineage:
        assert store.get_session(sid) is None
        with pytest.raises(SessionNotFoundError):
            store.transcript(sid)
    after = snapshot(backend, store_url)
    for table in ("sessions", "messages", "compactions"):
        assert [r for r in others[table] if "bystander" in repr(r)] == after[table]
    assert [m.content for m in store.transcript("bystander")] == ["bystander-0", "bystander-1", "bystander-2"]


def test_delete_unknown_or_invalid_id_writes_nothing(store, store_url, backend):
    _conversation(store, "kept", 2)
    before = snapshot(backend, store_url)
    with pytest.raises(SessionNotFoundError):
        store.delete_session("missing")
    with pytest.raises(InvalidSessionIdError):
        store.delete_session("bad\x00id")
    assert snapshot(backend, store_url) == before


def test_delete_then_same_id_starts_a_new_conversation_and_ids_are_not_reused(store):
    _conversation(store, "s", 3)
    old_ids = {m.id for m in store.transcript("s")}
    assert store.delete_session("s") == 3
    store.create_session("s")
    fresh = store.append("s", Message("user", "new"))
    assert fresh[0].seq == 1 and fresh[0].id > max(old_ids)
    assert store.archive("s") == [] and store.compactions("s") == []


def test_attempt_in_flight_elsewhere_commits_nothing_and_its_cleanup_recreates_nothing(store, store_url, backend):
    _conversation(store, "s", 4)
    lease = store.acquire_lease("s", "elsewhere", 30)
    snapshot_cooldown = Cooldown("s", store.now() + 100, "old")
    store.delete_session("s")
    before = snapshot(backend, store_url)
    with pytest.raises((SessionNotFoundError, LeaseLostError)):
        store.commit_compaction(lease, watermark=4, compacted=[Message("user", "sum")], mode="rotate")
    # the attempt's cleanup: every step either refuses or does nothing
    with pytest.raises(SessionNotFoundError):
        store.restore_cooldown("s", snapshot_cooldown)
    with pytest.raises(SessionNotFoundError):
        store.arm_cooldown("s", 60, "failed")
    assert store.release_lease(lease) is False
    assert store.renew_lease(lease, 30) is None
    assert snapshot(backend, store_url) == before
    assert _rows_of(backend, store_url, ["s"]) == dict.fromkeys(
        ("sessions", "messages", "leases", "cooldowns", "compactions"), 0
    )


# -- retract -----------------------------------------------------------------------


def test_retract_pops_the_last_live_message_into_the_archive(store):
    _conversation(store, "s", 3)
    last = store.transcript("s")[-1]
    popped = store.retract("s")
    assert popped == last and popped.state == "live"  # returned as it was
    assert [m.content for m in store.transcript("s")] == ["s-0", "s-1"]
    [archived] = store.archive("s")
    assert (archived.id, archived.seq, archived.state, archived.content) == (last.id, 3, "retracted", "s-2")
    again = store.append("s", Message("user", "next"))
    assert again[0].seq == 4  # seqs are never reused
    assert store.retract("s").seq == 4
    assert [m.content for m in store.transcript("s")] == ["s-0", "s-1"]


def test_retract_empty_returns_none_and_writes_nothing(store, store_url, backend):
    store.create_session("s")
    before = snapshot(backend, store_url)
    assert store.retract("s") is None
    assert snapshot(backend, store_url) == before


def test_retract_resolves_to_the_live_tip(store):
    _conversation(store, "root", 3)
    child = _rotate(store, "root")
    store.append(child, Message("assistant", "in child"))
    popped = store.retract("root")
    assert (popped.session_id, popped.content) == (child, "in child")
    assert [m.content for m in store.transcript(child)] == ["summary"]


def test_retract_on_a_session_ended_otherwise_or_unknown_is_refused(store, store_url, backend):
    _conversation(store, "s", 2)
    store.end_session("s", "user_exit")
    before = snapshot(backend, store_url)
    with pytest.raises(SessionEndedError) as caught:
        store.retract("s")
    assert caught.value.end_reason == "user_exit"
    with pytest.raises(SessionNotFoundError):
        store.retract("missing")
    assert snapshot(backend, store_url) == before


def test_commit_over_a_retracted_watermark_is_refused_inside_the_commit(store, store_url, backend):
    _conversation(store, "s", 4)
    lease = store.acquire_lease("s", "h", 30)
    watermark = store.transcript("s")[-1].seq
    store.retract("s")  # the snapshot's last message leaves after the snapshot was read
    before = snapshot(backend, store_url)
    for mode in ("in_place", "rotate"):
        with pytest.raises(SnapshotRetractedError) as caught:
            store.commit_compaction(lease, watermark=watermark, compacted=[Message("user", "s")], mode=mode)
        assert (caught.value.session_id, caught.value.watermark) == ("s", watermark)
    assert snapshot(backend, store_url) == before


def test_a_retracted_tail_message_is_not_carried(store):
    _conversation(store, "s", 3)
    lease = store.acquire_lease("s", "h", 30)
    watermark = store.transcript("s")[-1].seq
    store.append("s", [Message("user", "tail-1"), Message("assistant", "tail-2")])
    store.retract("s")  # tail-2 leaves; the snapshot's last message is still live
    record = store.commit_compaction(lease, watermark=watermark, compacted=[Message("user", "sum")], mode="in_place")
    assert record.tail_count == 1
    assert [m.content for m in store.transcript("s")] == ["sum", "tail-1"]
    assert {m.content: m.state for m in store.archive("s")}["tail-2"] == "retracted"


# -- prune_archive -------------------------------------------------------------------


def _compacted_conversation(store, sid: str) -> None:
    _conversation(store, sid, 4)
    lease = store.acquire_lease(sid, "h", 30)
    store.commit_compaction(lease, watermark=3, compacted=[Message("user", "sum")], mode="in_place")
    store.release_lease(lease)
    store.append(sid, Message("assistant", "to retract"))
    store.retract(sid)


def test_prune_all_blanks_archived_rows_and_keeps_their_place(store, store_url, backend):
    _compacted_conversation(store, "s")
    live_before = store.transcript("s")
    archive_before = store.archive("s")
    records = store.compactions("s")
    assert {m.state for m in archive_before} == {"compacted", "superseded", "retracted"}
    assert store.prune_archive(older_than_s=0) == len(archive_before)
    pruned = store.archive("s")
    assert [(m.id, m.seq, m.role, m.created_at) for m in pruned] == [
        (m.id, m.seq, m.role, m.created_at) for m in archive_before
    ]
    assert all(
        (m.state, m.content, m.name, m.tool_calls, dict(m.meta)) == ("pruned", "", None, None, {}) for m in pruned
    )
    assert store.transcript("s") == live_before and store.compactions("s") == records
    seqs = sorted(m.seq for m in store.transcript("s") + pruned)
    assert seqs == list(range(1, len(seqs) + 1))
    assert store.prune_archive(older_than_s=0) == 0  # pruned rows are not archived rows any more


def test_prune_counts_from_when_a_row_was_archived_not_created(store, store_url, backend):
    _conversation(store, "s", 3)
    # the messages are 40 days old, compacted today: a 30-day policy keeps them
    execute(backend, store_url, f"UPDATE messages SET created_at = created_at - {40 * DAY}")
    lease = store.acquire_lease("s", "h", 30)
    store.commit_compaction(lease, watermark=3, compacted=[Message("user", "sum")], mode="in_place")
    assert store.prune_archive(older_than_s=30 * DAY) == 0
    assert store.prune_archive(older_than_s=3600) == 0
    # 31 days later (the archive's clock moved back instead of waiting)
    execute(backend, store_url, f"UPDATE messages SET archived_at = archived_at - {31 * DAY} WHERE state <> 'live'")
    assert store.prune_archive(older_than_s=30 * DAY) == 3
    assert {m.state for m in store.archive("s")} == {"pruned"}


def test_prune_one_lineage_only(store):
    _compacted_conversation(store, "a")
    child = _rotate(store, "a")
    _compacted_conversation(store, "b")
    count_a = len(store.archive("a")) + len(store.archive(child))
    assert store.prune_archive(older_than_s=0, session_id=child) == count_a
    assert {m.state for m in store.archive("a")} == {"pruned"}
    assert "pruned" not in {m.state for m in store.archive("b")}
    with pytest.raises(SessionNotFoundError):
        store.prune_archive(older_than_s=0, session_id="missing")


@pytest.mark.parametrize("bad", [-1, -0.5, float("nan"), float("inf"), True, "30d", None])
def test_prune_rejects_a_bad_duration_and_writes_nothing(store, store_url, backend, bad):
    _compacted_conversation(store, "s")
    before = snapshot(backend, store_url)
    with pytest.raises(InvalidArgumentError):
        store.prune_archive(older_than_s=bad)
    assert snapshot(backend, store_url) == before


def test_archive_returns_every_non_live_state_in_seq_order(store):
    _compacted_conversation(store, "s")
    store.prune_archive(older_than_s=0)
    store.append("s", Message("user", "late"))
    store.retract("s")
    archive = store.archive("s")
    assert [m.seq for m in archive] == sorted(m.seq for m in archive)
    assert {m.state for m in archive} == {"pruned", "retracted"}


def test_developer_role_round_trips(store):
    store.create_session("s")
    [stored] = store.append("s", Message("developer", "be brief", name="policy"))
    assert (stored.role, stored.content, stored.name) == ("developer", "be brief", "policy")
    assert store.transcript("s")[0].to_dict() == {"role": "developer", "content": "be brief", "name": "policy"}


def test_rotation_after_end_keeps_compression_end(store):
    _conversation(store, "s", 2)
    child = _rotate(store, "s")
    assert store.get_session("s").end_reason == END_REASON_COMPRESSION
    assert store.retract("s").session_id == child
