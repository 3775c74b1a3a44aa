"""`compactable_end`: a snapshot never ends inside an open turn or an unanswered tool run."""

from __future__ import annotations

from protocol import StoredMessage
from protocol._turns import compactable_end, trailing_open_run_start


def stored(role, content="", *, seq, **fields):
    return StoredMessage(role, content, session_id="s", seq=seq, id=seq, created_at=0.0, **fields)


def call(i):
    return {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def chat(n, start=1):
    return [stored("user" if i % 2 else "assistant", f"m{i}", seq=i) for i in range(start, start + n)]


def test_without_a_turn_or_tool_run_everything_is_compactable():
    assert compactable_end(chat(5)) == 5


def test_an_open_turn_stays_out_by_count_and_by_first_seq():
    messages = chat(8)
    assert compactable_end(messages, turn_messages=3) == 5
    assert compactable_end(messages, turn_first_seq=4) == 3
    # another process appended after the turn's messages: the seq bound still holds
    assert compactable_end(messages, turn_messages=1, turn_first_seq=6) == 5
    assert compactable_end(messages, turn_messages=20) == 0


def test_an_unanswered_trailing_tool_run_stays_out():
    messages = chat(3) + [
        stored("assistant", "", seq=4, tool_calls=[call(1), call(2)]),
        stored("tool", "r1", seq=5, tool_call_id="c1"),
    ]
    assert trailing_open_run_start(messages) == 3
    assert compactable_end(messages) == 3
    answered = messages + [stored("tool", "r2", seq=6, tool_call_id="c2")]
    assert compactable_end(answered) == 6


def test_parallel_calls_stored_as_consecutive_assistant_messages_form_one_run():
    messages = chat(2) + [
        stored("assistant", "", seq=3, tool_calls=[call(1)]),
        stored("assistant", "", seq=4, tool_calls=[call(2)]),
        stored("tool", "r2", seq=5, tool_call_id="c2"),
    ]
    assert compactable_end(messages) == 2
    # an unanswered run before the open turn is trailing once the turn is cut off
    assert compactable_end(messages + chat(2, start=6), turn_messages=2) == 2
