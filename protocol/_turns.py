"""Where a compaction snapshot may end: never inside an open turn or an unanswered tool run.

Pure functions on messages, shared by the runtime (which knows the open turn) and
anything else that needs the same boundary.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._messages import Message, StoredMessage
from ._transcript import call_ids, in_tool_run

__all__ = ["compactable_end", "trailing_open_run_start"]


def compactable_end(
    messages: Sequence[StoredMessage], *, turn_messages: int = 0, turn_first_seq: int | None = None
) -> int:
    """How many leading ``messages`` a compaction may take into its snapshot.

    An open turn's messages stay out: ``turn_messages`` is how many it appended (so
    the last ones of the transcript), ``turn_first_seq`` the seq of its first one
    when known (exact even if another process appended after it). The earlier of the
    two bounds wins. A trailing tool run left with unanswered calls stays out too:
    its results are still coming.
    """
    end = max(0, len(messages) - max(0, turn_messages))
    if turn_first_seq is not None:
        end = min(end, next((i for i, m in enumerate(messages) if m.seq >= turn_first_seq), end))
    run_start = trailing_open_run_start(messages[:end])
    return end if run_start is None else run_start


def trailing_open_run_start(messages: Sequence[Message]) -> int | None:
    """Index of the tool run ending ``messages`` if one of its calls is not answered, else None.

    A tool run is a maximal sequence of assistant messages with ``tool_calls`` and
    ``tool`` messages (parallel calls may be stored as consecutive assistant messages).
    """
    start = len(messages)
    while start > 0 and in_tool_run(messages[start - 1]):
        start -= 1
    if start == len(messages):
        return None
    run = messages[start:]
    called = {call_id for m in run for call_id in call_ids(m)}
    answered = {m.tool_call_id for m in run if m.role == "tool"}
    return start if called - answered else None
