"""`seal_retractions`: which rows sealing a dead turn takes out of the live transcript."""

from __future__ import annotations

import pytest

from protocol import InvalidArgumentError, Message
from protocol._transcript import invalid_tool_pairing
from protocol._turns import seal_retractions


def call(*ids):
    return Message("assistant", None, tool_calls=[{"id": i, "type": "function"} for i in ids])


def result(call_id):
    return Message("tool", f"result of {call_id}", tool_call_id=call_id)


def user(text="ask"):
    return Message("user", text)


def answer(text="done"):
    return Message("assistant", text)


def kept(rows, in_turn, mode):
    gone = set(seal_retractions(rows, in_turn, mode))
    return [m for i, m in enumerate(rows) if i not in gone]


def test_keep_retracts_nothing_and_rollback_the_whole_trailing_run():
    rows = [user("before"), answer("reply"), user(), call("c1")]
    flags = [False, False, True, True]
    assert seal_retractions(rows, flags, "keep") == []
    assert seal_retractions(rows, flags, "rollback") == [2, 3]


def test_rollback_leaves_the_turns_rows_before_a_foreign_row():
    rows = [user(), answer("turn's"), user("foreign"), answer("turn's again")]
    assert seal_retractions(rows, [True, True, False, True], "rollback") == [3]
    assert seal_retractions(rows, [True, True, False, False], "rollback") == []


def test_a_whole_turn_is_kept_by_a_seal():
    rows = [user(), call("c1"), result("c1"), answer()]
    assert seal_retractions(rows, [True] * 4, "seal") == []


def test_a_dangling_call_is_retracted_and_the_ask_stays():
    rows = [user("earlier"), answer("earlier reply"), user(), call("c1")]
    assert seal_retractions(rows, [False, False, True, True], "seal") == [3]


def test_partial_results_go_with_their_call_from_the_first_broken_row_on():
    rows = [user(), call("c1"), result("c1"), call("c2", "c3"), result("c2"), user("follow-up"), answer("half")]
    # c1 is whole; the call of c2 and c3 lacks c3: it, its partial result and the answer after go
    assert seal_retractions(rows, [True] * 7, "seal") == [3, 4, 6]
    rest = kept(rows, [True] * 7, "seal")
    assert [m.role for m in rest] == ["user", "assistant", "tool", "user"]
    assert invalid_tool_pairing(rest, rows) is None


def test_a_result_without_its_call_is_broken():
    rows = [user(), result("nobody"), answer()]
    assert seal_retractions(rows, [True] * 3, "seal") == [1, 2]


def test_a_retraction_that_breaks_an_earlier_call_moves_the_start_back():
    # c1's result comes after the broken call c2: retracting from c2 on would take it,
    # leaving c1 unanswered, so the seal starts at c1
    rows = [user(), call("c1"), call("c2"), result("c1")]
    assert seal_retractions(rows, [True] * 4, "seal") == [1, 2, 3]


def test_only_the_trailing_run_is_touched():
    # a broken call of the turn before a foreign row is not the seal's to take
    rows = [user(), call("c1"), user("foreign"), call("c2")]
    assert seal_retractions(rows, [True, True, False, True], "seal") == [3]


def test_results_answering_calls_before_the_turn_are_whole():
    rows = [call("c0"), user(), result("c0"), answer()]
    assert seal_retractions(rows, [False, True, True, True], "seal") == []


def test_after_a_seal_every_call_is_followed_by_its_results():
    rows = [
        user("q1"),
        call("a", "b"),
        result("a"),
        result("b"),
        user("q2"),
        call("c"),
        result("c"),
        call("d"),
        result("x"),
    ]
    rest = kept(rows, [True] * len(rows), "seal")
    assert invalid_tool_pairing(rest, rest) is None
    assert [m.role for m in rest] == ["user", "assistant", "tool", "tool", "user", "assistant", "tool"]


@pytest.mark.parametrize("mode", ["", "SEAL", None, "drop"])
def test_an_unknown_mode_is_refused(mode):
    with pytest.raises(InvalidArgumentError):
        seal_retractions([user()], [True], mode)


def test_flags_must_match_the_rows():
    with pytest.raises(InvalidArgumentError):
        seal_retractions([user(), answer()], [True], "seal")
