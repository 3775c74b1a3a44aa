"""Handles: the thread-safe, cheap front of a session actor.

Every call is a protocol command sent to the actor's mailbox with a reply to
answer on: sync calls wait with a timeout on a `Reply` (a lock latch, much
cheaper than a Future); the ``*_async`` twins await a `concurrent.futures.Future`
through `asyncio.wrap_future`, so the event loop is
never blocked (a pykka future's ``__await__`` blocks in ``get()``). An append
skips the mailbox when nothing could be overtaken: ``append`` runs the actor's
append step on the caller's thread, ``append_async`` submits it to the store's
group commit and awaits the commit's answer (see `SessionActor.append_here` and
`SessionActor.submit_here`).

A caller that gives up withdraws its request (``cancel``): the actor claims a
mutating request before applying it, so a request is either applied and answered
or never applied (a retry cannot duplicate it). A request the actor holds behind
another handle's open turn is waited on up to ``policy.held_wait_s``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast, overload

from protocol import (
    CompressionDisabledError,
    CompressionOutcome,
    InvalidArgumentError,
    InvalidMessageError,
    Message,
    StoredMessage,
)
from protocol._checks import check_count
from protocol._commands import (
    Append,
    CloseTurn,
    Interrupt,
    OpenTurn,
    Origin,
    ReadArchive,
    ReadTranscript,
    Retract,
)
from protocol._messages import Role, check_key
from protocol._records import CompactionMode
from protocol.errors import AskTimeoutError, TurnReplayedError

from ._reply import LoopReplies, Reply
from .compaction._policy import OnBusy, check_on_busy
from .scheduling import hooks as _sched
from .session.commands import compress_command
from .session.request import Request
from .session.routing import Router
from .session.turns import TurnTicket

if TYPE_CHECKING:
    from .session.slot import Slot

__all__ = ["AskTimeoutError", "ReviewHandle", "SessionHandle", "Turn"]

logger = logging.getLogger("session_actors.handle")

#: Handle keys: a turn belongs to one handle object (any thread using it).
_handle_keys = itertools.count(1)


#: ``append(role)`` without content (None is a value: a tool-call message's content).
_MISSING: Any = object()


class _Handle:
    """What every handle can do: append, read, and follow the live id."""

    __slots__ = ("_registry", "_slot", "_key", "_replaying", "__weakref__")
    _origin: Origin = "main"

    def __init__(self, registry: Router, slot: Slot) -> None:
        self._registry = registry
        self._slot = slot
        self._key = next(_handle_keys)
        self._replaying: str | None = None  # the key of the replayed turn this handle is in

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
        if content is _MISSING and not fields and type(first) is Message:  # the common form
            messages: tuple[Message, ...] = (first,)
            single = True
        else:
            messages, single = _messages(first, content, fields)
        if self._replaying is not None:
            raise self._replayed_error()
        # The caller-runs path (`SessionActor.append_here`), inlined: every microsecond a
        # caller holds the GIL here slows all the other callers (see README, Benchmarks).
        slot = self._slot
        if slot.successor is not None:
            slot = slot.current()
        runner = slot.runner
        stored = None if runner is None else runner.append_here(messages, self._key)
        if stored is None:  # through the mailbox: only now is the command built
            stored = self._ask(Append(messages, origin=self._origin))
        return stored[0] if single else stored

    def retract(self) -> StoredMessage | None:
        """Take the last live message out of the live transcript (it stays in the
        archive as ``"retracted"``), ordered with this session's appends; returns it
        as it was, or None when the transcript is empty."""
        if self._replaying is not None:
            raise self._replayed_error()
        return self._ask(Retract(origin=self._origin))

    async def _append_submitted(self, messages: tuple[Message, ...]) -> list[StoredMessage] | None:
        """The submitted path (`SessionActor.submit_here`): None when the append must
        go through the mailbox."""
        runner = self._slot.current().runner
        if runner is None:
            return None
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[StoredMessage] | None] = loop.create_future()
        if not runner.submit_here(messages, self._key, functools.partial(LoopReplies.of(loop).post, answer)):
            return None
        return await answer  # cancelled meanwhile: it stays submitted (applied, answered to nobody)

    def transcript(self, *, limit: int | None = None) -> list[StoredMessage]:
        """The live transcript (durable, in seq order); with ``limit`` (>= 1) its latest
        ``limit`` messages, read at a cost that follows ``limit``."""
        return self._ask(_read_transcript(limit))

    def archive(self) -> list[StoredMessage]:
        """Compacted and superseded messages of the live session."""
        return self._ask(ReadArchive())

    def turn(self, on_busy: OnBusy | None = None, *, key: str | None = None) -> Turn:
        """A turn: ``with handle.turn():`` or ``async with handle.turn():``.

        While it is open, the messages appended through this handle (from any thread)
        are contiguous: appends from every other handle of the registry, and from
        every other process, are held and applied right after it closes, in arrival
        order (their callers are answered then). It holds the session's turn lease
        in the store (renewed by this registry; it lapses ``lease_ttl_s`` after a
        crash). Nested turns of the same handle join the open one. ``on_busy``
        (None: ``policy.on_busy``) says what to do when another turn is open:
        ``"enqueue"`` waits for it, ``"reject"`` raises `SessionBusyError`,
        ``"interrupt"`` asks it to end and waits, ``"rollback"`` does the same and
        then retracts what it appended. The actor closes a turn open longer than
        ``policy.max_turn_s`` (logged); the late exit is then a no-op. Leaving the
        block by an exception closes the turn too; what was appended stays.

        ``key`` (the platform's message id, say) makes the turn exactly-once: when a
        turn of that key was completed (closed by its holder) anywhere in the
        conversation, entering opens nothing, the returned `Turn`'s ``replayed`` is
        True and its ``messages`` are that turn's stored messages, and an append or
        retract through this handle inside the block raises `TurnReplayedError`.
        While that turn is open elsewhere this one waits (as ``on_busy`` says), then
        replays; a turn of the key that died and was sealed opens afresh. Keys follow
        the message-key rules (`InvalidMessageError`) and are unique per conversation.
        """
        return Turn(self, on_busy, key)

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
        """`append` from an event loop, never blocking it.

        When the actor could run the append on the caller's thread (see
        `SessionActor.append_here`), it is submitted to the store's group commit
        instead and answered by the commit (`SessionActor.submit_here`); else it goes
        through the mailbox. A task cancelled while its append is submitted leaves
        it applied (answered to nobody); one cancelled while it waits in the mailbox
        withdraws it unless the actor already claimed it (never applied twice).
        """
        messages, single = _messages(first, content, fields)
        if self._replaying is not None:
            raise self._replayed_error()
        stored = await self._append_submitted(messages)
        if stored is None:
            stored = await self._ask_async(Append(messages, origin=self._origin))
        return stored[0] if single else stored

    async def retract_async(self) -> StoredMessage | None:
        if self._replaying is not None:
            raise self._replayed_error()
        return await self._ask_async(Retract(origin=self._origin))

    async def transcript_async(self, *, limit: int | None = None) -> list[StoredMessage]:
        return await self._ask_async(_read_transcript(limit))

    async def archive_async(self) -> list[StoredMessage]:
        return await self._ask_async(ReadArchive())

    # -- plumbing -------------------------------------------------------------------

    def _stamp(self, command: Any) -> Any:
        if (
            dataclasses.is_dataclass(command)
            and not isinstance(command, type)
            and any(f.name == "origin" for f in dataclasses.fields(command))
        ):
            return dataclasses.replace(command, origin=self._origin)
        return command

    def _send(self, command: Any, reply: Any = None) -> Request:
        """Enqueue ``command``; the reply is a `Future` (async twins) or a `Reply` latch."""
        request = Request(command, Future() if reply is None else reply, self._key)
        self._slot = self._registry._dispatch(self._slot, request)
        return request

    def _ask(self, command: Any, timeout: float | None = None, abandoned: Callable[[Any], None] | None = None) -> Any:
        """Send ``command`` and wait for its answer (see the module docstring).

        ``abandoned(answer)`` runs when the caller gives up on a request the actor
        had already claimed: it still gets applied, and nobody is waiting for it.
        """
        timeout = self._registry.policy.ask_timeout_s if timeout is None else timeout
        sent = _sched.monotonic()
        request = self._send(command, Reply())  # a lock latch: much cheaper than a Future
        reply = request.reply
        for wait in _waits(request, self._registry.policy, timeout, sent, abandoned):
            try:
                return reply.result(timeout=wait)
            except FutureTimeout:
                if reply.done():  # the command itself raised a TimeoutError
                    raise
        raise self._timed_out(command, _sched.monotonic() - sent)

    async def _ask_async(
        self, command: Any, timeout: float | None = None, abandoned: Callable[[Any], None] | None = None
    ) -> Any:
        policy = self._registry.policy
        timeout = policy.ask_timeout_s if timeout is None else timeout
        sent = _sched.monotonic()
        if self._slot.current().closed:
            # restarting an evicted actor reads the store: keep that off the event loop
            request = await asyncio.to_thread(self._send, command)
        else:
            request = self._send(command)  # a lock held for microseconds and a queue put
        reply = request.reply
        answer = asyncio.wrap_future(reply)
        try:
            for wait in _waits(request, policy, timeout, sent, abandoned):
                if await _answered(answer, wait):
                    return answer.result()
        except asyncio.CancelledError:
            # the awaiting task was cancelled: withdraw if not applied yet
            if not _withdrawn(request):
                _when_answered(reply, abandoned)
            raise
        raise self._timed_out(command, _sched.monotonic() - sent)

    def _replayed_error(self) -> TurnReplayedError:
        return TurnReplayedError(
            self.session_id,
            self._replaying or "",
            message=f"turn {self._replaying!r} of {self.session_id!r} was completed before and is replayed: "
            "nothing is written through it",
        )

    def _timed_out(self, command: Any, waited: float) -> AskTimeoutError:
        return AskTimeoutError(f"no answer for {type(command).__name__} on {self.session_id!r} within {waited:.3g}s")


class Turn:
    """The context manager `handle.turn()` returns (``with`` and ``async with``).

    ``__enter__`` opens the turn and returns the handle: it takes the session's turn
    lease in the store, so no other path of this registry, nor any other process,
    appends until the turn closes. When another turn is open it does as ``on_busy``
    says (see `CompactionPolicy.on_busy`), waiting at most ``policy.held_wait_s``.
    ``interrupted`` becomes True when another caller asks this turn to end
    (``on_busy="interrupt"`` or ``"rollback"``); the holder decides when to leave.
    A keyed turn (``handle.turn(key=...)``) completed before opens nothing:
    ``replayed`` is True and ``messages`` holds that turn's stored messages (live
    copies where a compaction carried or repeated them verbatim, archived originals
    where a summary replaced them).
    """

    __slots__ = ("_handle", "_ticket", "_on_busy", "_interrupted", "_key", "replayed", "messages")

    def __init__(self, handle: _Handle, on_busy: str | None = None, key: str | None = None) -> None:
        if on_busy is not None:
            check_on_busy(on_busy)
        if key is not None:
            check_key(key)
        self._handle = handle
        self._on_busy = on_busy
        self._key = key
        self._ticket: TurnTicket | None = None
        self._interrupted: threading.Event | None = None
        #: entering found the keyed turn completed before: nothing was opened
        self.replayed = False
        #: the completed turn's stored messages when ``replayed`` (else empty)
        self.messages: list[StoredMessage] = []

    @property
    def interrupted(self) -> bool:
        """Has another caller asked this turn to end?"""
        event = self._interrupted
        return event is not None and event.is_set()

    def wait_interrupted(self, timeout: float | None = None) -> bool:
        """Wait until another caller asks this turn to end (at most ``timeout``
        seconds); True if it did. False at once when the turn is not open."""
        event = self._interrupted
        return event is not None and _sched.wait(event, timeout, "wait interrupted")

    def __enter__(self) -> Any:
        self._check_not_open()
        self._opened(self._handle._ask(OpenTurn(self._on_busy, self._key), abandoned=self._close_abandoned))
        return self._handle

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        ticket, self._ticket = self._ticket, None
        if ticket is None or self._left_replay(ticket):
            return
        try:
            self._handle._ask(CloseTurn(ticket.number))
        except Exception:
            if exc_type is None:
                raise
            logger.warning("closing turn %d of %r failed", ticket.number, self._handle, exc_info=True)

    async def __aenter__(self) -> Any:
        self._check_not_open()
        ticket = await self._handle._ask_async(OpenTurn(self._on_busy, self._key), abandoned=self._close_abandoned)
        self._opened(ticket)
        return self._handle

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        ticket, self._ticket = self._ticket, None
        if ticket is None or self._left_replay(ticket):
            return
        try:
            await self._handle._ask_async(CloseTurn(ticket.number))
        except Exception:
            if exc_type is None:
                raise
            logger.warning("closing turn %d of %r failed", ticket.number, self._handle, exc_info=True)

    def _close_now(self) -> None:
        """Close without waiting for the answer (any thread): the actor closes it in
        mailbox order."""
        ticket, self._ticket = self._ticket, None
        if ticket is not None and not self._left_replay(ticket):
            self._handle._send(CloseTurn(ticket.number))

    def _opened(self, ticket: TurnTicket) -> None:
        self._ticket, self._interrupted = ticket, ticket.interrupted
        if ticket.replay is not None:
            self.replayed, self.messages = True, list(ticket.replay)
            self._handle._replaying = self._key

    def _left_replay(self, ticket: TurnTicket) -> bool:
        """Leaving a replayed turn: nothing to close; the handle writes again."""
        if ticket.replay is None:
            return False
        self._handle._replaying = None
        return True

    def _close_abandoned(self, ticket: TurnTicket) -> None:
        """The caller gave up (cancelled, timed out) after the actor opened the turn:
        nobody will leave it, so close it now rather than hold the others for
        ``max_turn_s``."""
        if ticket.replay is None:
            self._handle._send(CloseTurn(ticket.number))

    def _check_not_open(self) -> None:
        if self._ticket is not None:
            raise InvalidArgumentError("this turn is already open; nest handle.turn() instead")


class SessionHandle(_Handle):
    """The main path of a session: appends, reads, compress and interrupt."""

    __slots__ = ()

    def compress(self, *, force: bool = False, mode: CompactionMode | None = None) -> CompressionOutcome:
        """Compact now (or join the attempt in flight); waits at most
        ``max_compaction_s + ask_timeout_s``."""
        return self._ask(compress_command(force, mode), self._registry.policy.compress_wait_s)

    async def compress_async(self, *, force: bool = False, mode: CompactionMode | None = None) -> CompressionOutcome:
        return await self._ask_async(compress_command(force, mode), self._registry.policy.compress_wait_s)

    def interrupt(self) -> bool:
        """Cancel the attempt in flight: True if it was cancelled before its commit."""
        return self._registry._interrupt(self._slot)

    async def interrupt_async(self) -> bool:
        return await asyncio.to_thread(self.interrupt)


class ReviewHandle(_Handle):
    """A background review sharing the session: appends and reads, never compacts."""

    __slots__ = ()

    _origin: Origin = "review"


def _when_answered(reply: Any, abandoned: Callable[[Any], None] | None) -> None:
    """Run ``abandoned(answer)`` once a request nobody waits for any more is answered."""
    if abandoned is None:
        return

    def settled(done: Any) -> None:
        try:
            answer = done.result(timeout=0)
        except BaseException:  # withdrawn, refused or failed: nothing was applied
            return
        try:
            abandoned(answer)
        except Exception:
            logger.warning("cleaning up an abandoned request failed", exc_info=True)

    reply.add_done_callback(settled)


async def _answered(answer: asyncio.Future[Any], timeout: float) -> bool:
    """Wait up to ``timeout`` for ``answer`` without cancelling it; True once it is in."""
    if timeout > 0 and not answer.done():
        await asyncio.wait((answer,), timeout=timeout)
    return answer.done()


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
            return (Message(cast(Role, first), content, **fields),), True  # Message checks the role
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


def _withdrawn(request: Any) -> bool:
    """Take back a request the actor has not claimed: it is never applied later."""
    return bool(request.reply.cancel() or request.withdraw_forwarded())


def _waits(
    request: Any, policy: Any, timeout: float, sent: float, abandoned: Callable[[Any], None] | None
) -> Iterator[float]:
    """How long an ask waits for its answer, stage by stage (its caller waits each
    out and stops at the answer): its timeout; behind another handle's turn, until
    ``policy.held_wait_s`` after it was sent; then, unless the request could be
    withdrawn (never applied later), one more ask timeout for an answer already on
    its way, after which ``abandoned`` gets the answer whenever it comes."""
    yield timeout
    if request.held:  # behind another handle's turn: it applies when that closes
        yield max(0.0, sent + policy.held_wait_s - _sched.monotonic())
    if _withdrawn(request):
        return
    yield policy.ask_timeout_s  # the actor claimed it just now: its answer is coming
    _when_answered(request.reply, abandoned)


def _read_transcript(limit: object) -> ReadTranscript:
    """The read, its ``limit`` checked before it reaches the actor."""
    return ReadTranscript(None if limit is None else check_count(limit, "limit", minimum=1))
