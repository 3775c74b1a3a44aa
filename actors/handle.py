"""Handles: the thread-safe, cheap front of a session actor.

Every call is a protocol command sent to the actor's mailbox with a reply to
answer on: sync calls wait with a timeout on a `Reply` (a lock latch, much
cheaper than a Future); the ``*_async`` twins await a `concurrent.futures.Future`
through `asyncio.wrap_future`, so the event loop is
never blocked (a pykka future's ``__await__`` blocks in ``get()``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, overload

from protocol import (
    MODES,
    Append,
    Compress,
    CompressionDisabledError,
    CompressionOutcome,
    Interrupt,
    InvalidArgumentError,
    InvalidMessageError,
    Message,
    ReadArchive,
    ReadTranscript,
    StoredMessage,
    TranscriptError,
)
from protocol.commands import Origin
from protocol.records import CompactionMode

from .reply import Reply
from .routing import Request, Router

if TYPE_CHECKING:
    from .slot import Slot

__all__ = ["AskTimeoutError", "ReviewHandle", "SessionHandle"]


#: ``append(role)`` without content (None is a value: a tool-call message's content).
_MISSING: Any = object()


class AskTimeoutError(TranscriptError, TimeoutError):
    """The session actor did not answer within the ask timeout."""


class _Handle:
    """What every handle can do: append, read, and follow the live id."""

    _origin: Origin = "main"

    def __init__(self, registry: Router, slot: Slot) -> None:
        self._registry = registry
        self._slot = slot

    @property
    def session_id(self) -> str:
        """The live id the handle's actor serves now (no store read)."""
        return self._slot.current().session_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.session_id!r})"

    # -- sync -------------------------------------------------------------------

    @overload
    def append(self, role: str, content: Any, /, **fields: Any) -> StoredMessage: ...
    @overload
    def append(self, message: Message, /) -> StoredMessage: ...
    @overload
    def append(self, messages: Sequence[Message], /) -> list[StoredMessage]: ...

    def append(self, first: Any, content: Any = _MISSING, /, **fields: Any) -> Any:
        """Append durably: ``(role, content, **fields)``, a `Message`, or a list of them."""
        messages, single = _messages(first, content, fields)
        stored = self._ask(Append(messages, origin=self._origin))
        return stored[0] if single else stored

    def transcript(self) -> list[StoredMessage]:
        """The live transcript (durable, in seq order)."""
        return self._ask(ReadTranscript())

    def archive(self) -> list[StoredMessage]:
        """Compacted and superseded messages of the live session."""
        return self._ask(ReadArchive())

    def ask(self, command: Any, *, timeout: float | None = None) -> Any:
        """Send any protocol command value (stamped with this handle's origin).

        `Interrupt` never goes through the mailbox (it would queue behind the work it
        must stop): it is delivered out of band, and only main handles may send it.
        """
        command = self._stamp(command)
        if isinstance(command, Interrupt):
            if command.origin == "review":
                raise CompressionDisabledError(self.session_id, "review handles cannot interrupt")
            return self._registry._interrupt(self._slot)
        return self._ask(command, timeout)

    # -- async twins --------------------------------------------------------------

    async def append_async(self, first: Any, content: Any = _MISSING, /, **fields: Any) -> Any:
        messages, single = _messages(first, content, fields)
        stored = await self._ask_async(Append(messages, origin=self._origin))
        return stored[0] if single else stored

    async def transcript_async(self) -> list[StoredMessage]:
        return await self._ask_async(ReadTranscript())

    async def archive_async(self) -> list[StoredMessage]:
        return await self._ask_async(ReadArchive())

    # -- plumbing -------------------------------------------------------------------

    def _stamp(self, command: Any) -> Any:
        if dataclasses.is_dataclass(command) and any(
                f.name == "origin" for f in dataclasses.fields(command)):
            return dataclasses.replace(command, origin=self._origin)
        return command

    def _send(self, command: Any, reply: Any = None) -> Any:
        """Enqueue ``command``; the reply is a `Future` (async twins) or a `Reply` latch."""
        if reply is None:
            reply = Future()
        self._slot = self._registry._dispatch(self._slot, Request(command, reply))
        return reply

    def _ask(self, command: Any, timeout: float | None = None) -> Any:
        timeout = self._registry.policy.ask_timeout_s if timeout is None else timeout
        reply = self._send(command, Reply())  # a lock latch: much cheaper than a Future
        try:
            return reply.result(timeout=timeout)
        except FutureTimeout as exc:
            if reply.done():  # the command itself raised a TimeoutError
                raise
            raise AskTimeoutError(f"no answer for {type(command).__name__} on "
                                  f"{self.session_id!r} within {timeout}s") from exc

    async def _ask_async(self, command: Any, timeout: float | None = None) -> Any:
        timeout = self._registry.policy.ask_timeout_s if timeout is None else timeout
        if self._slot.current().closed:
            # restarting an evicted actor reads the store: keep that off the event loop
            reply = await asyncio.to_thread(self._send, command)
        else:
            reply = self._send(command)  # a lock held for microseconds and a queue put
        try:
            return await asyncio.wait_for(asyncio.wrap_future(reply), timeout)
        except asyncio.TimeoutError as exc:
            if reply.done() and not reply.cancelled():
                raise
            raise AskTimeoutError(f"no answer for {type(command).__name__} on "
                                  f"{self.session_id!r} within {timeout}s") from exc


class SessionHandle(_Handle):
    """The main path of a session: appends, reads, compress and interrupt."""

    def compress(self, *, force: bool = False, mode: CompactionMode | None = None) -> CompressionOutcome:
        """Compact now (or join the attempt in flight); waits at most
        ``max_compaction_s + ask_timeout_s``."""
        return self._ask(_compress_command(force, mode), self._registry.policy.compress_wait_s)

    async def compress_async(self, *, force: bool = False,
                             mode: CompactionMode | None = None) -> CompressionOutcome:
        return await self._ask_async(_compress_command(force, mode),
                                     self._registry.policy.compress_wait_s)

    def interrupt(self) -> bool:
        """Cancel the attempt in flight: True if it was cancelled before its commit."""
        return self._registry._interrupt(self._slot)

    async def interrupt_async(self) -> bool:
        return await asyncio.to_thread(self.interrupt)


class ReviewHandle(_Handle):
    """A background review sharing the session: appends and reads, never compacts."""

    _origin: Origin = "review"


def _compress_command(force: bool, mode: CompactionMode | None) -> Compress:
    if not isinstance(force, bool):
        raise InvalidArgumentError(f"force must be a bool, got {force!r}")
    if mode is not None and mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES} or None, got {mode!r}")
    return Compress(force=force, mode=mode)


def _messages(first: Any, content: Any, fields: dict[str, Any]) -> tuple[tuple[Message, ...], bool]:
    """Normalize the append forms; validation happens here, before anything is sent."""
    if isinstance(first, Message):
        if content is not _MISSING or fields:
            raise InvalidArgumentError("append(Message) takes no other arguments")
        return (first,), True
    if isinstance(first, str):
        if content is _MISSING:  # None is content: an assistant message with tool_calls
            raise InvalidMessageError("append(role, content): content is missing")
        try:
            return (Message(first, content, **fields),), True
        except TypeError as exc:  # an unknown field name
            raise InvalidMessageError(f"bad message fields: {exc}") from exc
    if isinstance(first, Sequence) and not isinstance(first, (bytes, bytearray)):
        items = tuple(first)
        if content is not _MISSING or fields or not items:
            raise InvalidArgumentError("append(list) takes one non-empty list of messages")
        if not all(isinstance(m, Message) for m in items):
            raise InvalidMessageError("append(list) needs Message values")
        return items, False
    raise InvalidMessageError(f"cannot append {type(first).__name__}")
