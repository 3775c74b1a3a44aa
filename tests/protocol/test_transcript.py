"""Tool runs, tail boundaries and the valid-result check (protocol._transcript)."""

from __future__ import annotations

import pytest

from protocol import Message
from protocol._transcript import (
    call_ids,
    group_start,
    in_tool_run,
    invalid_tool_pairing,
    is_tail_boundary,
    tail_start,
)
from tests.tool_messages import call, result

U, A = Message("user", "ask"), Message("assistant", "answer")
REASONING = Message("assistant", "thinking", meta={"keep_with_next": True})


def test_tool_run_members_and_call_ids():
    assert in_tool_run(call("a")) and in_tool_run(result("a"))
    assert not in_tool_run(U) and not in_tool_run(A)
    assert not in_tool_run(Message("assistant", "x", tool_calls=[]))
    assert call_ids(call("a", "b")) == ["a", "b"]
    assert call_ids(Message("assistant", None, tool_calls=[{"call_id": "r1"}])) == ["r1"]
    assert call_ids(A) == [] and call_ids(result("a")) == []


def test_boundaries_never_inside_a_run_nor_after_keep_with_next():
    msgs = [U, call("a"), call("b"), result("a"), result("b"), A, REASONING, call("c"), result("c")]
    boundaries = [i for i in range(len(msgs) + 1) if is_tail_boundary(msgs, i)]
    # 2-4: inside the parallel-call run; 7: right after the reasoning item; 8: inside a run
    assert boundaries == [0, 1, 5, 6, 9]
    assert tail_start(msgs, 4) == 1 and tail_start(msgs, 8) == 6 and tail_start(msgs, 5) == 5
    assert tail_start(msgs, 4, floor=2) is None
    assert group_start(msgs, 8) == 6 and group_start(msgs, 3) == 1 and group_start(msgs, 5) == 5


def test_valid_transcripts_pass():
    snapshot = [U, call("a", "b"), result("b"), result("a"), A]
    assert invalid_tool_pairing(snapshot, snapshot) is None
    # a call whose result never arrived (a killed worker) is not held against it
    assert invalid_tool_pairing([U, call("a"), A], [U, call("a"), A]) is None
    # parallel calls stored as consecutive assistant messages form one run
    assert invalid_tool_pairing([U, call("a"), call("b"), result("a"), result("b")], []) is None


@pytest.mark.parametrize(
    "published, why",
    [
        ([U, result("a"), A], "answers no call"),  # orphaned result
        ([U, call("a"), A, result("a")], "lost its result"),  # result outside its run
        ([U, result("a"), call("a")], "answers no call"),  # result before its call
        ([U, call("a", "b"), result("b"), A], "lost its result"),  # a result was dropped
    ],
)
def test_broken_pairs_are_named(published, why):
    snapshot = [U, call("a", "b"), result("a"), result("b"), A]
    assert why in invalid_tool_pairing(published, snapshot)


def test_a_pair_already_broken_in_the_current_transcript_is_not_the_results_fault():
    current = [U, result("x"), A, call("y"), U]  # a gateway wrote an orphan and an unanswered call
    published = [Message("assistant", "summary"), result("x"), A, call("y"), U]
    assert invalid_tool_pairing(published, current, current=current) is None
    assert "answers no call" in invalid_tool_pairing(published, current)
    # damage the result adds is still refused
    worse = [*published, result("z")]
    assert "'z' answers no call" in invalid_tool_pairing(worse, current, current=current)
