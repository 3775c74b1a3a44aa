"""Turn rules on transcripts: where a compaction snapshot may end (never inside an open
turn or an unanswered tool run), and which rows sealing a dead turn retracts.

Pure functions on messages, shared by the runtime (which knows the open turn), both
stores (which seal dead turns) and anything else that needs the same rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ._messages import Message, StoredMessage
from ._transcript import call_ids, in_tool_run
from .errors import InvalidArgumentError

__all__ = ["SEAL_MODES", "SealMode", "compactable_end", "seal_retractions", "trailing_open_run_start"]

#: What sealing a dead turn does with its rows still at the end of the live transcript:
#: ``"seal"`` retracts those that leave it invalid for a chat API (see
#: `seal_retractions`), ``"keep"`` none, ``"rollback"`` all of them.
SealMode = Literal["seal", "keep", "rollback"]
SEAL_MODES: tuple[str, ...] = ("seal", "keep", "rollback")


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


def seal_retractions(transcript: Sequence[Message], in_turn: Sequence[bool], mode: str) -> list[int]:
    """Indexes (ascending) of the live ``transcript`` rows that sealing a turn retracts.

    ``in_turn[i]`` says whether row ``i`` was appended under the turn (a copy carried by
    a compaction counts as its original). Only the turn's *trailing run* is ever
    touched: its rows after every row that is not of the turn. ``mode``:

    - ``"keep"``: nothing.
    - ``"rollback"``: the whole trailing run.
    - ``"seal"``: from the first row of the trailing run that is *broken* (an assistant
      message whose tool calls are not all answered by tool messages after it, or a
      tool message whose call no assistant message before it makes), that row and
      every later one except ``user`` messages (the user's ask stays). Rows a
      retraction breaks in turn (an assistant message of the run that loses a result)
      move the start earlier, until the rows kept are whole: afterwards every tool call
      of the run is followed by its results, and every result by its call.

    Raises `InvalidArgumentError` for an unknown ``mode`` or lengths that differ.
    """
    if mode not in SEAL_MODES:
        raise InvalidArgumentError(f"mode must be one of {SEAL_MODES}, got {mode!r}")
    if len(transcript) != len(in_turn):
        raise InvalidArgumentError(f"{len(transcript)} rows but {len(in_turn)} turn flags")
    start = len(transcript)
    while start > 0 and in_turn[start - 1]:
        start -= 1
    if mode == "keep":
        return []
    if mode == "rollback":
        return list(range(start, len(transcript)))
    cut = len(transcript)
    while True:
        kept = [i for i in range(len(transcript)) if i < cut or transcript[i].role == "user"]
        broken = _first_broken(transcript, kept, start, cut)
        if broken is None:
            return [i for i in range(cut, len(transcript)) if transcript[i].role != "user"]
        cut = broken


def _first_broken(transcript: Sequence[Message], kept: Sequence[int], start: int, cut: int) -> int | None:
    """The first index in ``[start, cut)`` whose row is broken among the ``kept`` rows
    (in order): a call not answered after it, or a result without its call before it."""
    last_answer: dict[object, int] = {}  # call id -> the position of its last result
    for position, i in enumerate(kept):
        if transcript[i].role == "tool":
            last_answer[transcript[i].tool_call_id] = position
    called: set[object] = set()
    for position, i in enumerate(kept):
        message = transcript[i]
        if message.role == "tool":
            bad = message.tool_call_id not in called
        else:
            ids = call_ids(message)
            called.update(ids)
            bad = any(last_answer.get(call, -1) < position for call in ids)
        if bad and start <= i < cut:
            return i
    return None
