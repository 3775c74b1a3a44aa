"""The simulate integrity check can fail: each kind of loss is detected."""

from __future__ import annotations

import pytest

from actors.simulate._check import Ack, check_run
from persistence import open_store
from protocol import Message
from tests.cli.helpers import sql

pytestmark = pytest.mark.timeout(30)

ROOT = "run-x-000"


def rotated_lineage(path: str) -> tuple[list[Ack], str]:
    """ROOT rotated once with a two-message tail, then one append to the child."""
    store = open_store(path)
    try:
        store.create_session(ROOT)
        stored = store.append(ROOT, [Message("user", f"m{i}") for i in range(5)])
        lease = store.acquire_lease(ROOT, "test", 60)
        record = store.commit_compaction(lease, watermark=3, mode="rotate", compacted=[Message("user", "summary")])
        store.release_lease(lease)
        stored += store.append(record.child_session_id, Message("assistant", "after"))
        return [Ack(ROOT, m.id, m.text) for m in stored], record.child_session_id
    finally:
        store.close()


def check(path: str, acks: list[Ack]):
    store = open_store(path)
    try:
        return check_run(store, "run-x-", [ROOT], acks)
    finally:
        store.close()


def test_a_clean_rotation_accounts_for_everything(sqlite_path: str) -> None:
    acks, _child = rotated_lineage(sqlite_path)
    report = check(sqlite_path, acks)
    assert report.violations() == dict.fromkeys(report.violations(), 0)
    assert report.compactions == 1 and report.tail_messages_carried == 2


def test_unknown_row_or_changed_content_is_lost(sqlite_path: str) -> None:
    acks, _child = rotated_lineage(sqlite_path)
    report = check(sqlite_path, [*acks, Ack(ROOT, 10_000, "never stored"), Ack(ROOT, acks[0].id, "other text")])
    assert report.lost_messages == 2


def test_tail_without_a_carried_copy_is_lost(sqlite_path: str) -> None:
    acks, child = rotated_lineage(sqlite_path)
    sql(sqlite_path, "DELETE FROM messages WHERE session_id = ? AND origin_id = ?", child, acks[4].id)
    report = check(sqlite_path, acks)
    assert report.lost_messages == 1
    assert any("superseded without a carried copy" in e for e in report.examples)


def test_a_tail_copied_twice_is_a_duplicate(sqlite_path: str) -> None:
    acks, child = rotated_lineage(sqlite_path)
    sql(
        sqlite_path,
        "UPDATE messages SET origin_id = ? WHERE session_id = ? AND origin_id = ?",
        acks[3].id,
        child,
        acks[4].id,
    )
    assert check(sqlite_path, acks).duplicated_copies == 1


def test_writes_into_an_orphan_child_are_lost(sqlite_path: str) -> None:
    store = open_store(sqlite_path)
    try:
        store.create_session(ROOT)
        acks = [Ack(ROOT, m.id, m.text) for m in store.append(ROOT, Message("user", "hi"))]
        store.end_session(ROOT, "compression")
        store.create_session("run-x-000~a", parent_session_id=ROOT)
        store.create_session("run-x-000~b", parent_session_id=ROOT)
        acks += [Ack(ROOT, m.id, m.text) for m in store.append("run-x-000~b", Message("user", "x"))]
    finally:
        store.close()
    report = check(sqlite_path, acks)
    assert report.forks == 1
    assert report.lost_messages == 2  # left live in the ended root, and written to the orphan
    # fsck's orphan write is only the one in the non-oldest child: the root's row was
    # written before the root ended (a stranded row, a warning), yet it is still lost
    assert report.orphan_writes == 1


# -- the conversation checks: turns and tool pairs, from the database --------------------


def call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def appended(path: str, *batches: list[Message]) -> list[Ack]:
    """ROOT created, then each batch appended as one acknowledged append, in order."""
    store = open_store(path)
    try:
        store.create_session(ROOT)
        return [Ack(ROOT, m.id, m.text) for batch in batches for m in store.append(ROOT, batch)]
    finally:
        store.close()


def turn(tag: str, *messages: Message) -> list[Message]:
    return [Message(m.role, m.content, m.name, m.tool_call_id, m.tool_calls, {"turn": tag}) for m in messages]


def test_whole_turns_with_answered_calls_are_clean(sqlite_path: str) -> None:
    acks = appended(
        sqlite_path,
        turn("a", Message("user", "ask a")),
        turn("a", Message("assistant", None, tool_calls=[call("c1")]), Message("tool", "r1", tool_call_id="c1")),
        [Message("assistant", "review note")],
        turn("b", Message("user", "ask b"), Message("assistant", "answer b")),
    )
    report = check(sqlite_path, acks)
    assert report.turns_split == 0 and report.tool_results_separated == 0


def test_another_paths_message_inside_a_turn_is_a_split(sqlite_path: str) -> None:
    acks = appended(
        sqlite_path,
        turn("a", Message("user", "ask a")),
        [Message("assistant", "review note")],
        turn("a", Message("assistant", "answer a")),
        turn("b", Message("user", "ask b"), Message("assistant", "answer b")),
    )
    report = check(sqlite_path, acks)
    assert report.turns_split == 1 and report.violations()["turns_split"] == 1
    assert any("turn split: 'a'" in e for e in report.examples)


def test_a_message_between_a_call_and_its_result_separates_them(sqlite_path: str) -> None:
    acks = appended(
        sqlite_path,
        [Message("user", "ask")],
        [Message("assistant", None, tool_calls=[call("c1"), call("c2")])],
        [Message("tool", "r1", tool_call_id="c1")],
        [Message("assistant", "review note")],
        [Message("tool", "r2", tool_call_id="c2")],
    )
    report = check(sqlite_path, acks)
    assert report.tool_results_separated == 1
    assert report.violations()["tool_results_separated"] == 1


def test_a_call_left_unanswered_by_a_killed_worker_is_not_counted(sqlite_path: str) -> None:
    acks = appended(
        sqlite_path,
        [Message("user", "ask")],
        [Message("assistant", None, tool_calls=[call("c1")])],
        [Message("user", "ask again")],  # the re-run turn after the kill
        [Message("assistant", None, tool_calls=[call("c2")]), Message("tool", "r2", tool_call_id="c2")],
    )
    assert check(sqlite_path, acks).tool_results_separated == 0


def test_a_tool_result_carried_alone_into_a_compaction_is_separated(sqlite_path: str) -> None:
    acks = appended(
        sqlite_path,
        [Message("user", "ask")],
        [Message("assistant", None, tool_calls=[call("c1")])],
        [Message("tool", "r1", tool_call_id="c1")],
    )
    store = open_store(sqlite_path)
    try:  # a compaction whose watermark cut the pair: the call summarized, the result carried
        lease = store.acquire_lease(ROOT, "test", 60)
        store.commit_compaction(lease, watermark=2, mode="in_place", compacted=[Message("user", "summary")])
        store.release_lease(lease)
    finally:
        store.close()
    assert check(sqlite_path, acks).tool_results_separated == 1


def test_a_key_stored_twice_is_a_duplicate(sqlite_path: str) -> None:
    acks, _child = rotated_lineage(sqlite_path)
    sql(sqlite_path, "UPDATE messages SET key = 'k' WHERE id IN (?, ?)", acks[0].id, acks[1].id)
    report = check(sqlite_path, acks)
    assert report.duplicated_copies == 1
    assert any("key 'k'" in e for e in report.examples)
