"""Mailbox commands: the values a `SessionActor` receives. Frozen, never dicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ._messages import Message
from ._records import CompactionMode

__all__ = [
    "Append",
    "CloseTurn",
    "Command",
    "Compress",
    "Interrupt",
    "OpenTurn",
    "Origin",
    "ReadArchive",
    "ReadTranscript",
    "Retract",
]

#: Who sent a command: the main turn path or a background review sharing the id.
Origin = Literal["main", "review"]


@dataclass(frozen=True, slots=True)
class Append:
    """Append messages durably, in order, in one transaction."""

    messages: tuple[Message, ...]
    origin: Origin = "main"


@dataclass(frozen=True, slots=True)
class Compress:
    """Compact the session. ``mode=None`` uses the policy's mode."""

    force: bool = False
    mode: CompactionMode | None = None
    origin: Origin = "main"
    automatic: bool = False


@dataclass(frozen=True, slots=True)
class Interrupt:
    """Cancel the attempt in flight (delivered out of band, never queued)."""

    origin: Origin = "main"


@dataclass(frozen=True, slots=True)
class OpenTurn:
    """Open a turn for the sending handle (or join its open one); answers a ticket
    (the turn's number and its interrupt event).

    While it is open, appends from every other handle (and every other holder's
    process) are held and applied after it closes. ``on_busy``: what to do when
    another turn is open (None: the policy's). ``key``: the turn's idempotency key
    (a completed turn of that key answers a replay instead of opening).
    """

    on_busy: str | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class CloseTurn:
    """Close turn number ``turn`` (a no-op once the actor closed it for running too long)."""

    turn: int


@dataclass(frozen=True, slots=True)
class Retract:
    """Take the last live message out of the live transcript (``store.retract``),
    ordered with the session's appends."""

    origin: Origin = "main"


@dataclass(frozen=True, slots=True)
class ReadTranscript:
    """Return the live transcript (its latest ``limit`` messages when one is set)."""

    limit: int | None = None


@dataclass(frozen=True, slots=True)
class ReadArchive:
    """Return every non-live message (compacted, superseded, retracted, pruned)."""


Command = Append | Compress | Interrupt | OpenTurn | CloseTurn | Retract | ReadTranscript | ReadArchive
