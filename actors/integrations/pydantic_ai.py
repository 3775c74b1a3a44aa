"""`PydanticAISession`: a Pydantic AI conversation kept by a `SessionRegistry`.

``agent.run(prompt, message_history=await s.messages())``, then ``await
s.add(result.new_messages())``: the conversation lives in session-actors (appends go
through the session's actor, compaction is the registry's), and every message
round-trips exactly (see `actors.integrations._pydantic_ai_messages` for the mapping).

Pydantic AI is an optional extra (``pip install 'session-actors[pydantic-ai]'``),
imported when a session is constructed, never when this module is imported.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from protocol import ConfigurationError, InvalidArgumentError, SessionNotFoundError, StoredMessage, validate_session_id
from protocol._messages import check_key

from ..compaction._policy import OnBusy, check_on_busy
from ._pydantic_ai_messages import META_KEY, from_messages, to_messages

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

    from .. import SessionHandle, SessionRegistry, Turn

__all__ = ["META_KEY", "SOURCE", "PydanticAISession", "PydanticAITurn"]

#: The ``source`` of sessions this adapter creates (``session-actors sessions --source``).
SOURCE = "pydantic-ai"

_T = TypeVar("_T")

#: The open turn of the current task: (registry, session id, the turn's handle). Any
#: `PydanticAISession` of that session in the task writes through it (one per request is
#: fine), so its writes are the turn's instead of being held until the turn closes.
_TURN: contextvars.ContextVar[tuple[Any, str, SessionHandle] | None] = contextvars.ContextVar(
    "session_actors_pydantic_ai_turn", default=None
)


def _type_adapter() -> Any:
    try:
        from pydantic_ai.messages import ModelMessagesTypeAdapter
    except ImportError as exc:
        raise ConfigurationError(
            "PydanticAISession needs Pydantic AI: pip install 'session-actors[pydantic-ai]'"
        ) from exc
    return ModelMessagesTypeAdapter


class PydanticAISession:
    """A Pydantic AI conversation kept by a `SessionRegistry` (cheap: one per request is fine).

    ``messages()`` is the conversation as ``list[ModelMessage]`` for ``message_history``
    (compacted: a summary comes back as a user prompt); ``add(messages)`` stores a run's
    ``result.new_messages()`` as one durable, contiguous append. ``async with
    session.turn(key=message_id) as turn:`` keeps the run whole and exactly-once.
    ``on_busy`` (None: the registry policy's) is what a turn does when another is open.
    """

    def __init__(self, registry: SessionRegistry, session_id: str, *, on_busy: OnBusy | None = None) -> None:
        if on_busy is not None:
            check_on_busy(on_busy)
        self._adapter = _type_adapter()
        self.session_id = validate_session_id(session_id)
        self.on_busy = on_busy
        self._registry = registry
        self._handle: SessionHandle | None = None

    def __repr__(self) -> str:
        return f"PydanticAISession({self.session_id!r})"

    async def messages(self) -> list[ModelMessage]:
        """The conversation, oldest first, as Pydantic AI messages."""
        stored = await self._with_handle(lambda handle: handle.transcript_async())
        return self.to_model_messages(stored)

    async def add(self, messages: Sequence[ModelMessage]) -> list[StoredMessage]:
        """Store ``messages`` (a run's ``result.new_messages()``) durably, in order, as one
        contiguous append; returns the stored chat messages."""
        if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
            raise InvalidArgumentError(f"messages must be a sequence of ModelMessage, got {type(messages).__name__}")
        try:  # the adapter's JSON form: exactly what it reads back
            dumped = json.loads(self._adapter.dump_json(list(messages)))
        except Exception as exc:  # pydantic's serialization errors name the bad value
            raise InvalidArgumentError(f"messages are not Pydantic AI messages: {exc}") from exc
        chat = to_messages(dumped)  # all checked before any write
        if not chat:
            return []
        return await self._with_handle(lambda handle: handle.append_async(chat))

    def turn(self, on_busy: OnBusy | None = None, *, key: str | None = None) -> _TurnScope:
        """A turn for one run: ``async with session.turn(key=message_id) as turn:``.

        The block's reads and writes through any `PydanticAISession` of this session (in
        this task) are the turn's; other paths and workers wait until it closes. With
        ``key`` (the platform's message id) the run is exactly-once: when a turn of that
        key completed before, the block opens nothing, the yielded `PydanticAITurn` has
        ``replayed`` True and ``messages`` (that run's stored messages), and `add` inside
        it raises `TurnReplayedError`."""
        if on_busy is not None:
            check_on_busy(on_busy)
        if key is not None:
            check_key(key)
        return _TurnScope(self, on_busy or self.on_busy, key)

    def to_model_messages(self, stored: Sequence[StoredMessage]) -> list[ModelMessage]:
        """Pydantic AI messages for chat messages of this library (a transcript, a turn's)."""
        return list(self._adapter.validate_json(json.dumps(from_messages(stored))))

    # -- plumbing ---------------------------------------------------------------------------

    async def _with_handle(self, call: Callable[[SessionHandle], Awaitable[_T]]) -> _T:
        """Run ``call`` on the open turn's handle, else this session's; a lineage erased
        meanwhile (``registry.delete``, ``session-actors delete``) starts afresh."""
        open_turn = _TURN.get()
        if open_turn is not None and open_turn[0] is self._registry and open_turn[1] == self.session_id:
            return await call(open_turn[2])
        handle = self._handle or await self._open_handle()
        try:
            return await call(handle)
        except SessionNotFoundError:  # nothing was written: retrying cannot duplicate
            self._handle = None
            return await call(await self._open_handle())

    async def _open_handle(self) -> SessionHandle:
        handle = await self._registry.session_async(self.session_id, source=SOURCE)
        self._handle = self._handle or handle  # two racing opens: either handle serves
        return self._handle


class PydanticAITurn:
    """What ``async with session.turn(...)`` yields.

    ``replayed``: a turn of this key completed before and nothing was opened;
    ``messages``: then, that run's stored messages (its answer last, as every keyed
    turn's), else empty; ``model_messages``: the same as Pydantic AI messages;
    ``turn``: the underlying `Turn` (``interrupted``, ``wait_interrupted``)."""

    __slots__ = ("messages", "model_messages", "replayed", "turn")

    def __init__(self, turn: Turn, model_messages: list[ModelMessage]) -> None:
        self.turn = turn
        self.replayed: bool = turn.replayed
        self.messages: list[StoredMessage] = list(turn.messages)
        self.model_messages = model_messages

    @property
    def interrupted(self) -> bool:
        """Has another caller asked this turn to end (``on_busy="interrupt"``)?"""
        return self.turn.interrupted

    def wait_interrupted(self, timeout: float | None = None) -> bool:
        return self.turn.wait_interrupted(timeout)


class _TurnScope:
    """`PydanticAISession.turn`: a turn on a handle of its own, published to the task."""

    def __init__(self, session: PydanticAISession, on_busy: OnBusy | None, key: str | None) -> None:
        self._session, self._on_busy, self._key = session, on_busy, key
        self._turn: Turn | None = None
        self._token: contextvars.Token[tuple[Any, str, SessionHandle] | None] | None = None

    async def __aenter__(self) -> PydanticAITurn:
        session = self._session
        handle = await session._registry.session_async(session.session_id, source=SOURCE)
        turn = handle.turn(self._on_busy, key=self._key)
        await turn.__aenter__()
        self._turn = turn
        self._token = _TURN.set((session._registry, session.session_id, handle))
        try:
            replay = session.to_model_messages(turn.messages) if turn.replayed else []
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return PydanticAITurn(turn, replay)

    async def __aexit__(self, *exc_info: Any) -> None:
        token, self._token = self._token, None
        if token is not None:
            _TURN.reset(token)
        turn, self._turn = self._turn, None
        if turn is not None:
            await turn.__aexit__(*exc_info)
