"""The conversation checks of a ``simulate`` run, read from the database.

- *Turn split by another path*: the acknowledged messages of one turn (one
  ``meta["turn"]`` value) are not contiguous among the acknowledged messages of
  their session in seq order: another path's message landed inside the turn. Rows a
  compaction wrote are not acknowledged appends, so they never count; a message a
  killed worker wrote but never acknowledged is not counted either.
- *Tool result separated from its call*: a ``tool`` message whose call is not
  earlier in its own tool run, in a session's live transcript (what the model reads
  next) or among all its rows in seq order (what was appended, with what each
  compaction wrote where it wrote it). A call left without a result (a worker killed
  in between) is not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import groupby

from protocol import Message, StoredMessage
from protocol._transcript import call_ids, in_tool_run

__all__ = ["separated_tool_results", "split_turns"]


def _meta_turn(row: StoredMessage) -> object:
    return row.meta.get("turn")


def split_turns(acked: Iterable[StoredMessage], turn_of: Callable[[StoredMessage], object] = _meta_turn) -> list[str]:
    """The turns (``turn_of(row)`` values, by default ``meta["turn"]``) another path's
    message landed inside."""
    split: set[str] = set()
    by_session = sorted(acked, key=lambda m: (m.session_id, m.seq))
    for _, rows in groupby(by_session, key=lambda m: m.session_id):
        positions: dict[str, list[int]] = {}
        for index, row in enumerate(rows):
            turn = turn_of(row)
            if isinstance(turn, str):
                positions.setdefault(turn, []).append(index)
        split.update(turn for turn, found in positions.items() if found[-1] - found[0] != len(found) - 1)
    return sorted(split)


def separated_tool_results(messages: Sequence[Message]) -> list[int]:
    """Indexes of the ``tool`` messages whose call is not earlier in their tool run."""
    separated: list[int] = []
    called: set[str] = set()
    for index, message in enumerate(messages):
        if not in_tool_run(message):
            called = set()  # a run ended: the next one starts with no calls made
            continue
        called.update(call_ids(message))
        if message.role == "tool" and message.tool_call_id not in called:
            separated.append(index)
    return separated
