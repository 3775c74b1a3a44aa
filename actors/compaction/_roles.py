"""Role alternation for a compacted set (the last step before the commit).

A compressor that drops the user's latest ask makes the model forget what it was
asked, so the compacted set always contains it, put back where it belongs in
order: right before the *kept tail* (the longest run at the end of the set equal to
the end of the snapshot), moved earlier to the start of a tool run the kept tail
begins inside. Everything in the kept tail came after the ask, so the ask never
lands after its own answer. Strict chat templates reject two ``user`` messages in a
row, so with ``merge=True`` adjacent user messages are merged, every merged
message's ``meta`` kept in ``meta["merged_from"]``. The tail (messages appended
during the summary) is carried verbatim by the store and is not touched here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from protocol import SUMMARY_PREFIX, Message
from protocol._messages import is_real_user_ask
from protocol._transcript import group_start

__all__ = ["latest_real_ask", "merge_adjacent_user_turns", "restore_real_user_ask"]

_SEPARATOR = "\n\n"
#: Fields compared to find the kept tail (``meta`` may be rewritten by a compressor).
_TAIL_FIELDS = ("role", "content", "name", "tool_call_id", "tool_calls")


def latest_real_ask(snapshot: Sequence[Message]) -> Message | None:
    """The last user message that is neither a compaction summary nor synthetic."""
    for message in reversed(snapshot):
        if is_real_user_ask(message):
            return message
    return None


def restore_real_user_ask(
    snapshot: Sequence[Message], compacted: Sequence[Message], *, merge: bool = True
) -> list[Message]:
    """``compacted`` with the snapshot's latest real ask back in order (rule 9)."""
    result = [message.as_message() for message in compacted]
    ask = latest_real_ask(snapshot)
    if ask is None or _contains_ask(result, ask):
        return merge_adjacent_user_turns(result) if merge else result
    at = _ask_position(snapshot, result, ask)
    result.insert(at, ask.as_message())
    if merge:
        result = _merge_ask(result, at)
        result = merge_adjacent_user_turns(result)
    return result


def _ask_position(snapshot: Sequence[Message], result: list[Message], ask: Message) -> int:
    kept = _kept_tail_length(snapshot, result)
    if kept:
        return group_start(result, len(result) - kept)
    if snapshot and snapshot[-1] is ask:
        return len(result)  # not answered yet: it stays last
    for i, message in enumerate(result):
        if message.text.startswith(SUMMARY_PREFIX):
            return i  # its answer is inside the summary
    return len(result)


def _kept_tail_length(snapshot: Sequence[Message], result: Sequence[Message]) -> int:
    """Length of the longest run ending ``result`` equal to the end of ``snapshot``."""
    kept = 0
    while kept < min(len(snapshot), len(result)) and _same(result[-1 - kept], snapshot[-1 - kept]):
        kept += 1
    return kept


def _same(a: Message, b: Message) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in _TAIL_FIELDS)


def _merge_ask(result: list[Message], at: int) -> list[Message]:
    """Merge the inserted ask with one user neighbour, the following one first."""
    ask = result[at]
    if at + 1 < len(result) and result[at + 1].role == "user":
        merged = _merge([ask, result[at + 1]])
        return result[:at] + [merged] + result[at + 2 :]
    if at > 0 and result[at - 1].role == "user":
        merged = _merge([result[at - 1], ask], text_first=ask)
        return result[: at - 1] + [merged] + result[at + 1 :]
    return result


def merge_adjacent_user_turns(messages: Sequence[Message]) -> list[Message]:
    """Merge every run of adjacent ``user`` messages into one, in position order."""
    merged: list[Message] = []
    for message in messages:
        if merged and merged[-1].role == "user" and message.role == "user":
            merged[-1] = _merge([merged[-1], message])
        else:
            merged.append(message)
    return merged


def _contains_ask(messages: Sequence[Message], ask: Message) -> bool:
    """The ask is kept verbatim, or as the lead (or end) of a merged user turn.

    A bare substring match is not enough: "login bug" inside an older, longer ask
    would count as kept and the latest ask would silently vanish.
    """
    for m in messages:
        if m.role != "user":
            continue
        if m.content == ask.content:
            return True
        if (
            isinstance(m.content, str)
            and isinstance(ask.content, str)
            and (m.content.startswith(ask.content + _SEPARATOR) or m.content.endswith(_SEPARATOR + ask.content))
        ):
            return True
    return False


def _merge(pair: list[Message], *, text_first: Message | None = None) -> Message:
    """One user message from two in position order; ``text_first``'s content leads.

    It keeps the later message's ``meta`` plus ``merged_from`` (every merged message's
    ``meta``, flattened), minus ``synthetic`` unless every merged message had it.
    """
    earlier, later = pair
    first = text_first or earlier
    second = later if first is earlier else earlier
    sources = _sources(earlier) + _sources(later)
    meta = {k: v for k, v in later.meta.items() if k != "merged_from"}
    meta["merged_from"] = sources
    if not all(source.get("synthetic") for source in sources):
        meta.pop("synthetic", None)
    return Message("user", _join(first.content, second.content), name=first.name or second.name, meta=meta)


def _sources(message: Message) -> list[dict[str, Any]]:
    previous = message.meta.get("merged_from")
    if isinstance(previous, list) and all(isinstance(m, Mapping) for m in previous):
        return [dict(m) for m in previous]
    return [dict(message.meta)]


def _join(first: Any, second: Any) -> Any:
    if isinstance(first, str) and isinstance(second, str):
        return first + _SEPARATOR + second
    return _parts(first) + [{"type": "text", "text": _SEPARATOR}] + _parts(second)


def _parts(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
