"""Tool-call transcripts through a registry, on both backends."""

from __future__ import annotations

import asyncio

import pytest

from actors import HeadTailCompressor
from actors.testing import GatedCompressor, ScriptedCompressor
from protocol import CompressionStatus, InvalidMessageError, Message
from protocol._transcript import invalid_tool_pairing
from tests.tool_messages import call, issue_turns, result

from .helpers import result_of, run_in_thread

pytestmark = pytest.mark.timeout(60)

CALLS = [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]


def test_append_shorthand_with_content_none(make_registry):
    registry = make_registry()
    s = registry.session("tools")
    stored = s.append("assistant", None, tool_calls=CALLS)
    assert stored.content is None and stored.tool_calls == CALLS
    s.append("tool", "12 C", tool_call_id="call_1")
    assert [m.content for m in s.transcript()] == [None, "12 C"]
    assert s.transcript()[0].to_dict()["content"] is None
    assert asyncio.run(s.append_async("assistant", None, tool_calls=CALLS)).content is None
    with pytest.raises(InvalidMessageError, match="content is missing"):
        s.append("user")
    with pytest.raises(InvalidMessageError, match="None only"):
        s.append("user", None)
    assert len(s.transcript()) == 3  # nothing written by the refused ones


def test_issue_example_last_live_message_stays_the_last_answer(make_registry):
    registry = make_registry(HeadTailCompressor(keep_last=2))
    s = registry.session("issue")
    s.append(issue_turns())
    outcome = s.compress()
    assert outcome.status is CompressionStatus.COMPACTED
    live = s.transcript()
    assert live[-1].content == "answer 5"
    ask = [m.content for m in live].index("ask 5")
    assert [m.as_message() for m in live[ask + 1 :]] == issue_turns()[-4:]
    assert invalid_tool_pairing(live, issue_turns()) is None


def test_merge_user_messages_false_commits_adjacent_users(make_registry):
    compressor = ScriptedCompressor(
        [Message("user", "kept"), Message("user", "note", meta={"n": 1}), Message("assistant", "end")]
    )
    registry = make_registry(compressor, merge_user_messages=False)
    s = registry.session("nomerge")
    s.append([Message("user", "kept"), Message("assistant", "x"), Message("assistant", "end")])
    assert s.compress().status is CompressionStatus.COMPACTED
    assert [(m.role, m.content) for m in s.transcript()] == [("user", "kept"), ("user", "note"), ("assistant", "end")]


def _assert_failed_invalid(outcome, s, store, before) -> None:
    assert outcome.status is CompressionStatus.FAILED and outcome.reason == "invalid_result"
    assert "tool" in outcome.error or "call" in outcome.error
    assert [m.id for m in s.transcript()] == before  # nothing written
    assert store.compactions(s.session_id) == []
    cooldown = store.cooldown(s.session_id)
    assert cooldown is not None and cooldown.is_live(store.now())
    assert cooldown.error == outcome.error


@pytest.mark.parametrize(
    "bad",
    [
        [Message("user", "ask 0"), result("a0"), Message("assistant", "answer 0")],  # orphaned result
        [Message("user", "ask 0"), call("a0", "b0"), result("a0"), Message("assistant", "answer 0")],
    ],
)
def test_a_result_breaking_a_tool_pair_is_failed_and_writes_nothing(make_registry, bad):
    registry = make_registry(ScriptedCompressor(bad))
    s = registry.session("bad")
    before = [m.id for m in s.append(issue_turns(1) + [Message("user", "more")])]
    _assert_failed_invalid(s.compress(), s, registry.store, before)


def test_the_tail_counts_a_late_result_whose_call_was_summarized_is_invalid(make_registry):
    gated = GatedCompressor()  # keeps only a summary: the call c1 is gone
    registry = make_registry(gated)
    s = registry.session("late")
    # the snapshot ends with an answered run; a second result for c1 arrives in the tail:
    # valid where it is now (after its call), orphaned once the call is summarized away
    s.append([Message("user", "ask"), call("c1"), result("c1")])
    thread, box = run_in_thread(s.compress)
    assert gated.wait_started()
    s.append(Message("tool", "late duplicate", tool_call_id="c1"))
    before = [m.id for m in s.transcript()]
    gated.release()
    _assert_failed_invalid(result_of(thread, box), s, registry.store, before)
