"""Rule 9 as rewritten: the dropped ask goes back in order; merges keep every meta."""

from __future__ import annotations

import threading

import pytest

from actors import CompactionPolicy, HeadTailCompressor
from actors.compaction._roles import restore_real_user_ask
from protocol import SUMMARY_PREFIX, InvalidArgumentError, Message
from protocol._transcript import invalid_tool_pairing
from tests.tool_messages import call, issue_turns, result

SUMMARY = Message("assistant", f"{SUMMARY_PREFIX} s", meta={"synthetic": True})


def test_issue_example_keeps_the_last_answer_last():
    snapshot = issue_turns()
    compacted = HeadTailCompressor(keep_last=2).compress(snapshot, target_tokens=500, cancel=threading.Event())
    result = restore_real_user_ask(snapshot, compacted)
    assert result[-1] == Message("assistant", "answer 5")  # was the last ask before the rewrite
    ask = next(i for i, m in enumerate(result) if m.content == "ask 5")
    assert result[ask + 1 :] == snapshot[-4:]  # right before its own calls, results and answer
    assert invalid_tool_pairing(result, snapshot) is None


def test_a_kept_tail_beginning_inside_a_tool_run_puts_the_ask_before_the_run():
    snapshot = [
        Message("user", "first"),
        Message("assistant", "a"),
        Message("user", "ask"),
        call("c1"),
        result("c1"),
        Message("assistant", "done"),
    ]
    # a custom compressor kept [result, done] verbatim and rewrote the call before them
    compacted = [Message("user", "first"), SUMMARY, call("c1"), result("c1"), Message("assistant", "done")]
    compacted[2] = Message("assistant", "calling", tool_calls=compacted[2].tool_calls)
    result_ = restore_real_user_ask(snapshot, compacted)
    assert [m.text for m in result_] == ["first", SUMMARY.text, "ask", "calling", "result c1", "done"]


@pytest.mark.parametrize(
    "snapshot_end, expected",
    [
        ([Message("user", "ask")], ["x", SUMMARY.text, "ask"]),  # unanswered: last
        ([Message("user", "ask"), Message("assistant", "y")], ["x", "ask", SUMMARY.text]),  # before summary
    ],
)
def test_without_a_kept_tail(snapshot_end, expected):
    snapshot = [Message("user", "x"), Message("assistant", "first answer"), *snapshot_end]
    out = restore_real_user_ask(snapshot, [Message("assistant", "x"), SUMMARY], merge=False)
    assert [m.text for m in out] == expected
    no_summary = restore_real_user_ask(snapshot, [Message("assistant", "x")], merge=False)
    assert [m.text for m in no_summary] == ["x", "ask"]  # no summary: at the end


def test_ask_merges_with_the_following_user_message_and_keeps_every_meta():
    snapshot = [
        Message("user", "first"),
        Message("assistant", "a"),
        Message("user", "ask", meta={"platform_msg_id": "m-7"}),
        Message("assistant", "b"),
        Message("user", "bg done", meta={"synthetic": True, "event": 3}),
    ]
    compacted = [Message("user", "first"), SUMMARY, Message("user", "bg done", meta={"synthetic": True, "event": 3})]
    out = restore_real_user_ask(snapshot, compacted)
    assert len(out) == 3
    merged = out[-1]
    assert merged.content == "ask\n\nbg done"  # ask text first
    assert merged.meta["event"] == 3  # the later message's meta...
    assert merged.meta["merged_from"] == [{"platform_msg_id": "m-7"}, {"synthetic": True, "event": 3}]
    assert "synthetic" not in merged.meta  # ...minus synthetic: the ask was real


def test_ask_merges_with_a_preceding_user_message_ask_text_first():
    snapshot = [Message("user", "ask", meta={"id": 1}), Message("assistant", "answer")]
    compacted = [Message("user", "note", meta={"synthetic": True, "id": 0}), Message("assistant", "answer")]
    out = restore_real_user_ask(snapshot, compacted)
    assert out[0].content == "ask\n\nnote" and out[0].meta["id"] == 1
    assert out[0].meta["merged_from"] == [{"synthetic": True, "id": 0}, {"id": 1}]
    assert out[1] == Message("assistant", "answer")


def test_other_adjacent_users_merge_in_order_and_merged_from_flattens():
    earlier = Message("user", "a\n\nb", meta={"k": "b", "merged_from": [{"k": "a"}, {"k": "b"}]})
    compacted = [earlier, Message("user", "c", meta={"k": "c"}), Message("assistant", "z")]
    snapshot = [Message("user", "a\n\nb"), Message("assistant", "z")]
    out = restore_real_user_ask(snapshot, compacted)
    assert out[0].content == "a\n\nb\n\nc"
    assert out[0].meta == {"k": "c", "merged_from": [{"k": "a"}, {"k": "b"}, {"k": "c"}]}
    synthetic = [
        Message("user", "s1", meta={"synthetic": True}),
        Message("user", "s2", meta={"synthetic": True}),
        Message("assistant", "z"),
    ]
    assert restore_real_user_ask([], synthetic)[0].meta["synthetic"] is True  # all were synthetic


def test_merge_false_never_merges():
    snapshot = [
        Message("user", "first"),
        Message("assistant", "a"),
        Message("user", "ask"),
        Message("assistant", "b"),
        Message("user", "bg", meta={"synthetic": True}),
    ]
    compacted = [
        Message("user", "first"),
        Message("user", "also"),
        SUMMARY,
        Message("user", "bg", meta={"synthetic": True}),
    ]
    out = restore_real_user_ask(snapshot, compacted, merge=False)
    assert [m.text for m in out] == ["first", "also", SUMMARY.text, "ask", "bg"]
    assert all("merged_from" not in m.meta for m in out)


def test_policy_merge_user_messages_is_a_bool_defaulting_to_true():
    assert CompactionPolicy().merge_user_messages is True
    assert CompactionPolicy(merge_user_messages=False).merge_user_messages is False
    with pytest.raises(InvalidArgumentError, match="merge_user_messages"):
        CompactionPolicy(merge_user_messages=1)
