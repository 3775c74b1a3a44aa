"""Role alternation for a compacted set (DESIGN section 5, step 9).

Strict chat templates reject two ``user`` messages in a row, and a compressor that
drops the user's latest ask makes the model forget what it was asked. So the
compacted set always contains the latest real ask and never has two adjacent
``user`` messages. The tail (messages appended during the summary) is carried
verbatim by the store and is not touched here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from protocol import Message, is_real_user_ask

__all__ = ["latest_real_ask", "merge_adjacent_user_turns", "restore_real_user_ask"]

_SEPARATOR = "\n\n"


def latest_real_ask(snapshot: Sequence[Message]) -> Message | None:
    """The last user message that is neither a compaction summary nor synthetic."""
    for message in reversed(snapshot):
        if is_real_user_ask(message):
            return message
    return None


def restore_real_user_ask(snapshot: Sequence[Message], compacted: Sequence[Message]) -> list[Message]:
    """Return ``compacted`` with the snapshot's latest real ask kept and no user/user pair.

    A dropped ask is appended at the end, or merged in front of a trailing ``user``
    message (``ask + "\\n\\n" + message``) where appending would make two in a row.
    """
    result = [message.as_message() for message in compacted]
    ask = latest_real_ask(snapshot)
    if ask is not None and not _contains_ask(result, ask):
        if result and result[-1].role == "user":
            result[-1] = _merge(ask, result[-1], meta=dict(ask.meta))
        else:
            result.append(ask.as_message())
    return merge_adjacent_user_turns(result)


def merge_adjacent_user_turns(messages: Sequence[Message]) -> list[Message]:
    """Merge every run of adjacent ``user`` messages into one, in order."""
    merged: list[Message] = []
    for message in messages:
        if merged and merged[-1].role == "user" and message.role == "user":
            first = merged[-1]
            meta = {**first.meta, **message.meta}
            if not (first.meta.get("synthetic") and message.meta.get("synthetic")):
                meta.pop("synthetic", None)
            merged[-1] = _merge(first, message, meta=meta)
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
        if isinstance(m.content, str) and isinstance(ask.content, str) and (
                m.content.startswith(ask.content + _SEPARATOR)
                or m.content.endswith(_SEPARATOR + ask.content)):
            return True
    return False


def _merge(first: Message, second: Message, *, meta: dict[str, Any]) -> Message:
    """One user message: ``first`` then ``second``, content joined by a blank line."""
    if isinstance(first.content, str) and isinstance(second.content, str):
        content: Any = first.content + _SEPARATOR + second.content
    else:
        content = _parts(first.content) + [{"type": "text", "text": _SEPARATOR}] + _parts(second.content)
    return Message("user", content, name=first.name or second.name, meta=meta)


def _parts(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
