"""`HeadTailCompressor`: the shipped local compressor (no network, deterministic)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from protocol import SUMMARY_PREFIX, InvalidArgumentError, Message

from ._shape import split_transcript, summary_message

__all__ = ["HeadTailCompressor"]

SUMMARY_LINE_CHARS = 160
DEFAULT_KEEP_LAST = 6


class _KeepLastPolicy(Protocol):
    """What `HeadTailCompressor.for_policy` reads of a `CompactionPolicy`."""

    keep_last: int


class HeadTailCompressor:
    """Local, deterministic, no network.

    Keeps the leading system prompt, the first real user ask and the last
    ``keep_last`` messages (the policy's when None), and replaces the middle with one
    summary message starting with ``[CONTEXT COMPACTION]`` that lists each dropped
    message on a line, truncated to fit ``target_tokens``. The kept tail never starts
    inside a tool run or right after a ``keep_with_next`` message (it grows earlier
    instead) and always holds the last message (see `split_transcript`). A
    transcript with no middle comes back unchanged (the attempt ends UNCHANGED).
    """

    name = "head-tail"

    def __init__(self, keep_last: int | None = None) -> None:
        if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 0):
            raise InvalidArgumentError(f"keep_last must be an int >= 0 or None, got {keep_last!r}")
        self.keep_last = keep_last

    def for_policy(self, policy: _KeepLastPolicy) -> HeadTailCompressor:
        return self if self.keep_last is not None else HeadTailCompressor(policy.keep_last)

    def compress(self, messages: Sequence[Message], *, target_tokens: int, cancel: threading.Event) -> list[Message]:
        split = split_transcript(messages, self._keep_last())
        if not split.middle or cancel.is_set():
            return [m.as_message() for m in messages]
        summary = summary_message(_summarize(split.middle, target_tokens), split)
        return [*split.head, summary, *split.tail]

    def _keep_last(self) -> int:
        return DEFAULT_KEEP_LAST if self.keep_last is None else self.keep_last


def _summarize(middle: Sequence[Message], target_tokens: int) -> str:
    budget_chars = max(200, target_tokens * 2)  # about half the target, in characters
    lines = [f"{SUMMARY_PREFIX} {len(middle)} earlier messages, condensed:"]
    used = len(lines[0])
    for message in middle:
        text = " ".join(message.text.split())
        line = f"- {message.role}: {text[:SUMMARY_LINE_CHARS]}"
        if used + len(line) > budget_chars:
            lines.append(f"- ... {len(middle) - len(lines) + 1} more")
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)
