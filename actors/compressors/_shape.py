"""The shape both shipped compressors give a transcript: head, one summary, kept tail.

The head is the leading system prompt plus the first real user ask; the kept tail is
the last ``keep_last`` messages, moved earlier until it starts on a safe boundary
(never inside a tool run, never right after a ``keep_with_next`` message: see
`protocol._transcript`) and always holding the last message, so a transcript still
ends where it did; everything else is the middle, replaced by one summary.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from protocol import Message
from protocol._messages import is_real_user_ask
from protocol._transcript import tail_start

__all__ = ["Split", "adopt_keep_last", "split_transcript", "summary_message"]


class _KeepsLast(Protocol):
    keep_last: int | None


C = TypeVar("C", bound=_KeepsLast)


@dataclass(frozen=True, slots=True)
class Split:
    head: list[Message]
    middle: list[Message]
    tail: list[Message]


def split_transcript(messages: Sequence[Message], keep_last: int) -> Split:
    """Head, middle and kept tail of ``messages`` (plain messages); no middle: unchanged."""
    plain = [m.as_message() for m in messages]
    head = _head_indexes(plain)
    floor = max(head, default=-1) + 1
    wanted = max(min(len(plain) - keep_last, len(plain) - 1), floor)
    start = tail_start(plain, wanted, floor=floor)
    if start is None:  # no safe boundary after the head: keep everything
        return Split(plain, [], [])
    middle = [m for i, m in enumerate(plain[:start]) if i not in head]
    return Split([plain[i] for i in sorted(head)], middle, plain[start:])


def summary_message(text: str, split: Split) -> Message:
    """The summary between head and tail, never a ``user`` next to a ``user``."""
    neighbours = {split.head[-1].role if split.head else None, split.tail[0].role if split.tail else None}
    return Message("assistant" if "user" in neighbours else "user", text, meta={"synthetic": True, "compaction": True})


def adopt_keep_last(compressor: C, policy: Any) -> C:
    """``compressor`` when it has its own ``keep_last``, else a copy with the policy's
    (what ``for_policy`` does for the shipped compressors; see `bind_compressor`)."""
    if compressor.keep_last is not None:
        return compressor
    bound = copy.copy(compressor)
    bound.keep_last = policy.keep_last
    return bound


def _head_indexes(messages: Sequence[Message]) -> set[int]:
    """Leading system messages plus the first real user ask."""
    head: set[int] = set()
    for i, message in enumerate(messages):
        if message.role != "system":
            break
        head.add(i)
    for i, message in enumerate(messages):
        if is_real_user_ask(message):
            head.add(i)
            break
    return head
