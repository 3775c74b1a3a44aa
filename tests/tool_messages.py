"""Tool-call messages for tests: calls, results and the issue's example transcript."""

from __future__ import annotations

from protocol import Message

__all__ = ["call", "issue_turns", "result"]


def call(*ids: str) -> Message:
    """One assistant message calling a tool once per id (``content=None``, as OpenAI has it)."""
    return Message(
        "assistant",
        None,
        tool_calls=[{"id": i, "type": "function", "function": {"name": "lookup", "arguments": "{}"}} for i in ids],
    )


def result(call_id: str) -> Message:
    return Message("tool", f"result {call_id}", tool_call_id=call_id)


def issue_turns(turns: int = 6) -> list[Message]:
    """Issue 9's example: user, assistant with two tool calls, two results, assistant."""
    out: list[Message] = []
    for t in range(turns):
        out += [
            Message("user", f"ask {t}"),
            call(f"a{t}", f"b{t}"),
            result(f"a{t}"),
            result(f"b{t}"),
            Message("assistant", f"answer {t}"),
        ]
    return out
