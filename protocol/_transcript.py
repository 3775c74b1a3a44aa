"""Pure rules on transcripts: tool runs, safe tail boundaries, the valid-result check.

A *tool run* is a maximal sequence of assistant messages with ``tool_calls`` and
``tool`` messages (parallel calls may be stored as consecutive assistant messages).
OpenAI-compatible APIs reject a ``tool`` message whose call is not before it, so a
compressor never starts the part it keeps verbatim inside a run, nor right after a
message glued to the next one by ``meta["keep_with_next"]`` (a reasoning item).
Both compressors and the compaction attempt use these rules; they live here so
neither has to import the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._messages import Message

__all__ = [
    "call_ids",
    "group_start",
    "in_tool_run",
    "invalid_tool_pairing",
    "is_tail_boundary",
    "keeps_with_next",
    "tail_start",
]


def in_tool_run(message: Message) -> bool:
    """An assistant message with tool calls, or a tool result."""
    return message.role == "tool" or (message.role == "assistant" and bool(message.tool_calls))


def keeps_with_next(message: Message) -> bool:
    """The message must not be separated from the one after it."""
    return bool(message.meta.get("keep_with_next"))


def call_ids(message: Message) -> list[str]:
    """The ids of the calls an assistant message makes (``id``, or ``call_id``)."""
    calls = message.tool_calls if message.role == "assistant" else None
    if not isinstance(calls, list):
        return []
    ids = []
    for call in calls:
        if isinstance(call, dict):
            call_id = call.get("id", call.get("call_id"))
            if isinstance(call_id, str):
                ids.append(call_id)
    return ids


def is_tail_boundary(messages: Sequence[Message], index: int) -> bool:
    """Whether a verbatim tail may start at ``index`` (``len`` = empty tail: always)."""
    if index <= 0 or index >= len(messages):
        return True
    before = messages[index - 1]
    if keeps_with_next(before):
        return False
    return not (in_tool_run(before) and in_tool_run(messages[index]))


def tail_start(messages: Sequence[Message], wanted: int, *, floor: int = 0) -> int | None:
    """The latest tail boundary at or before ``wanted`` and not before ``floor``.

    Moving earlier keeps more messages verbatim, never fewer; None when no index in
    ``[floor, wanted]`` is a boundary (keep everything after ``floor`` instead).
    """
    for index in range(min(wanted, len(messages)), floor - 1, -1):
        if is_tail_boundary(messages, index):
            return index
    return None


def group_start(messages: Sequence[Message], index: int) -> int:
    """Where the glued group holding ``index`` starts (``index`` if it starts one)."""
    while index > 0 and not is_tail_boundary(messages, index):
        index -= 1
    return index


def _runs(messages: Sequence[Message]) -> list[range]:
    runs: list[range] = []
    start: int | None = None
    for i, message in enumerate(messages):
        if in_tool_run(message):
            if start is None:
                start = i
        elif start is not None:
            runs.append(range(start, i))
            start = None
    if start is not None:
        runs.append(range(start, len(messages)))
    return runs


def invalid_tool_pairing(
    published: Sequence[Message], snapshot: Sequence[Message], *, current: Sequence[Message] | None = None
) -> str | None:
    """Why ``published`` breaks a tool pair, or None when it is valid.

    Every ``tool`` message must answer a call made earlier in its own tool run, and
    every call still present whose result was in ``snapshot`` must be answered in its
    run (a call whose result never arrived is left alone). With ``current`` (the live
    transcript the result replaces), a pair already broken there is not held against
    the result: a compaction is refused only for damage it would add.
    """
    answered = {m.tool_call_id for m in snapshot if m.role == "tool" and m.tool_call_id}
    tolerated = {key for key, _ in _problems(current, answered)} if current is not None else set()
    for key, text in _problems(published, answered):
        if key not in tolerated:
            return text
    return None


def _problems(messages: Sequence[Message], answered: set[Any]) -> list[tuple[tuple[str, Any], str]]:
    problems = []
    for run in _runs(messages):
        where = f"(message {run.start + 1} starts its tool run)"
        called: list[str] = []
        results: set[Any] = set()
        for i in run:
            message = messages[i]
            if message.role == "assistant":
                called.extend(call_ids(message))
            elif message.tool_call_id not in called:
                problems.append(
                    (
                        ("orphan", message.tool_call_id),
                        f"tool result {message.tool_call_id!r} answers no call made before it in its tool run {where}",
                    )
                )
            else:
                results.add(message.tool_call_id)
        problems += [
            (("lost", c), f"call {c!r} lost its result {where}") for c in called if c in answered and c not in results
        ]
    return problems
