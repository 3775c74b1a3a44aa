"""An append whose messages carry idempotency keys, the part both backends share:
which messages to write once their keys are claimed, and what each message of the
append answers.

A backend claims every key of the append in the claim table first (its primary key
makes a key unique per conversation), then writes the messages `plan` keeps, then
answers as `answers` says: a written message, or the stored one for a key claimed
before (in the conversation, or earlier in this same append).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from protocol import StoredMessage, TranscriptError

__all__ = ["Plan", "answers", "keys_of", "missing_row", "plan"]

#: Per message of the append: ``(True, index in the written messages)`` or
#: ``(False, key)``: answered by the message already stored under that key.
Plan = list[tuple[bool, Any]]


def keys_of(params: Sequence[Mapping[str, Any]]) -> list[str]:
    """The distinct keys of an append, sorted (two appends claiming the same keys in
    the same order cannot deadlock on PostgreSQL)."""
    return sorted({p["key"] for p in params if p["key"] is not None})


def plan(params: Sequence[Mapping[str, Any]], claimed: set[str]) -> tuple[list[Mapping[str, Any]], Plan]:
    """The messages to write (no key, or a key this append claimed, first time in it)
    and the plan of each message's answer."""
    fresh: list[Mapping[str, Any]] = []
    first_of: dict[str, int] = {}  # key -> index in fresh
    steps: Plan = []
    for p in params:
        key = p["key"]
        if key is not None and key in first_of:
            steps.append((True, first_of[key]))
        elif key is None or key in claimed:
            if key is not None:
                first_of[key] = len(fresh)
            steps.append((True, len(fresh)))
            fresh.append(p)
        else:
            steps.append((False, key))
    return fresh, steps


def answers(
    steps: Plan, written: Sequence[StoredMessage], stored: Callable[[str], StoredMessage]
) -> list[StoredMessage]:
    return [written[i] if new else stored(i) for new, i in steps]


def missing_row(key: str) -> TranscriptError:
    """A key claimed with no message carrying it: only a hand-edited database."""
    return TranscriptError(f"idempotency key {key!r} is claimed but no message carries it")
