"""`AgentsSession`: the OpenAI Agents SDK's ``Session`` protocol over a registry.

``Runner.run(agent, input, session=AgentsSession(registry, "discord:123"))`` keeps the
conversation in session-actors: appends go through the session's actor, compaction
is the registry's (policy, compressor, lease, fencing), and every item type
round-trips exactly (see `protocol._response_items` for the mapping).

The SDK is an optional extra (``pip install 'session-actors[openai-agents]'``),
imported when a session is constructed, never when this module is imported.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from protocol import (
    ConfigurationError,
    InvalidArgumentError,
    InvalidMessageError,
    SessionNotFoundError,
    StoredMessage,
    Usage,
    validate_session_id,
)
from protocol._messages import check_key
from protocol._response_items import item_to_message, message_to_items
from protocol.errors import InvalidSessionSettingsError

from ..compaction._policy import OnBusy, check_on_busy
from ._recall_tool import recall_tool
from ._run_turns import RUN_HANDLE, RunTurn, RunTurns
from ._run_usage import RunUsage

if TYPE_CHECKING:
    from .. import SessionHandle, SessionRegistry

__all__ = ["SOURCE", "AgentsSession", "InvalidSessionSettingsError", "recall_tool"]

logger = logging.getLogger("session_actors.integrations.openai_agents")
logger.addHandler(logging.NullHandler())

#: The ``source`` of sessions this adapter creates (``session-actors sessions --source``).
SOURCE = "openai-agents"

_T = TypeVar("_T")


def _session_settings_module() -> Any:
    try:
        from agents.memory import session_settings
    except ImportError as exc:
        raise ConfigurationError(
            "AgentsSession needs the OpenAI Agents SDK: pip install 'session-actors[openai-agents]'"
        ) from exc
    return session_settings


class AgentsSession:
    """A session of the OpenAI Agents SDK kept by a `SessionRegistry`.

    Behaves like the SDK's ``SQLiteSession``: ``get_items(limit)`` returns the latest
    ``limit`` items in order (``session_settings.limit`` when ``limit`` is None),
    ``pop_item()`` retracts the last item (None when empty), ``clear_session()``
    **erases the whole lineage** (`SessionRegistry.delete`), and every call after
    `close` raises `RuntimeError`. `close` does not close the registry.

    ``async with session.turn():`` around ``Runner.run(...)`` keeps the run whole:
    the run's reads and writes through this session (in that task) are the turn's,
    and no other path, task or process appends inside it. ``on_busy`` (None: the
    registry policy's) is what such a turn does when another is open. With
    ``run_turns=True`` the session opens a turn for each run by itself, from the run
    context the SDK passes it (see `actors.integrations._run_turns`); leave it off when
    a tool waits on a write to the same session through another handle (that write
    would be held until the run's turn closes).

    Each run's token usage (from the run context the SDK passes) is recorded on the
    last assistant message of each batch it writes, with ``model`` as its model
    (the run context names none); `Store.usage` sums it.
    """

    def __init__(
        self,
        registry: SessionRegistry,
        session_id: str,
        *,
        session_settings: Any = None,
        on_busy: OnBusy | None = None,
        run_turns: bool = False,
        model: str | None = None,
    ) -> None:
        _check_model(model)
        if on_busy is not None:
            check_on_busy(on_busy)
        if not isinstance(run_turns, bool):
            raise InvalidArgumentError(f"run_turns must be a bool, got {run_turns!r}")
        self.on_busy = on_busy
        self._usage = RunUsage(model)
        self._runs = RunTurns(self) if run_turns else None
        settings = _session_settings_module()
        self.session_id = validate_session_id(session_id)
        self.session_settings = _coerce(settings, session_settings)
        self._settings = settings
        self._registry = registry
        self._lock = threading.Lock()  # guards _handle (an asyncio lock binds to one loop)
        self._handle: SessionHandle | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"AgentsSession({self.session_id!r})"

    # -- the Session protocol ---------------------------------------------------------------

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[dict[str, Any]]:
        """The conversation as items, oldest first; the latest ``limit`` when one is set.
        ``wrapper``: the run context the SDK passes (``run_turns``)."""
        self._check_open()
        limit = self._settings.resolve_session_limit(_check_limit(limit), self.session_settings)
        if limit is None:
            messages = await self._with_handle(lambda handle: handle.transcript_async(), wrapper)
            return [item for message in messages for item in message_to_items(message)]
        if limit <= 0:  # no items, as the SDK's sessions answer a limit below 1
            return []
        # A message is one item or more: the latest `limit` messages hold the latest
        # `limit` items, read at a cost that follows the limit, not the transcript.
        latest = await self._with_handle(lambda handle: handle.transcript_async(limit=limit), wrapper)
        items = _latest_items(latest, limit)
        if len(items) < limit and len(latest) == limit:  # a message that rendered no item
            everything = await self._with_handle(lambda handle: handle.transcript_async(), wrapper)
            items = _latest_items(everything, limit)
        return items

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        """Append ``items`` durably, in order, as one contiguous batch."""
        self._check_open()
        messages = [item_to_message(item) for item in items]  # all checked before any write
        messages, recorded = self._usage.record(wrapper, messages)
        if messages:
            await self._with_handle(lambda handle: handle.append_async(messages), wrapper)
            recorded()
        if self._runs is not None:
            await self._runs.after_add(wrapper, items)

    async def pop_item(self, *, wrapper: Any = None) -> dict[str, Any] | None:
        """Retract the most recent item and return it (None when the session is empty)."""
        self._check_open()
        retracted = await self._with_handle(lambda handle: handle.retract_async(), wrapper)
        if retracted is None:
            return None
        items = message_to_items(retracted)
        return items[-1] if items else None

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Erase the whole lineage (`SessionRegistry.delete`); the next call starts afresh."""
        self._check_open()
        try:
            await self._registry.delete_async(self.session_id)
        except SessionNotFoundError:
            pass  # nothing stored yet: already clear
        self._forget(self._handle)

    def close(self) -> None:
        """Stop using this session object (the registry and the data stay)."""
        self._closed = True
        self._forget(self._handle)

    def turn(self, on_busy: OnBusy | None = None, *, key: str | None = None) -> RunTurn:
        """A turn for one run: ``async with session.turn(): await Runner.run(agent, x,
        session=session)``. It yields the `Turn` (``interrupted``,
        ``wait_interrupted``). ``on_busy``: None for this session's.

        ``key`` (the platform's message id) makes the run exactly-once: a turn of that
        key completed before opens nothing, and the yielded `Turn` has ``replayed``
        True and ``messages``, the stored messages of the run that answered it (the
        gateway answers from them instead of running the agent again); writes
        through the session inside it raise `TurnReplayedError`."""
        self._check_open()
        if on_busy is not None:
            check_on_busy(on_busy)
        if key is not None:
            check_key(key)
        return RunTurn(self, on_busy or self.on_busy, key)

    # -- plumbing ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("AgentsSession is closed")

    async def _with_handle(self, call: Callable[[SessionHandle], Awaitable[_T]], wrapper: Any = None) -> _T:
        """Run ``call`` on the session's handle; a lineage erased meanwhile (by
        `clear_session` of another object, another process, or ``session-actors
        delete``) starts a fresh conversation, as SQLiteSession does after a clear."""
        runs = self._runs
        if runs is not None and wrapper is not None:
            await runs.enter(wrapper)  # the run's first call opens its turn
        # inside a run's turn: the turn's handle
        handle = RUN_HANDLE.get() or (runs.handle(wrapper) if runs is not None else None) or self._handle
        if handle is None:  # awaited only until there is one: a coroutine per call costs the loop
            handle = await self._current_handle()
        try:
            return await call(handle)
        except SessionNotFoundError:  # nothing was written: retrying cannot duplicate
            self._forget(handle)
            return await call(await self._current_handle())

    async def _current_handle(self) -> SessionHandle:
        handle = self._handle
        if handle is None:
            opened = await self._registry.session_async(self.session_id, source=SOURCE)
            with self._lock:  # the first handle wins; handles are cheap, the actor is one
                if self._handle is None:
                    self._handle = opened
                handle = self._handle
        return handle

    def _forget(self, handle: SessionHandle | None) -> None:
        with self._lock:
            if self._handle is handle:
                self._handle = None


def _coerce(settings: Any, value: Any) -> Any:
    """``SessionSettings`` from a dict exactly as the SDK coerces it, errors typed."""
    if value is None:
        return settings.SessionSettings()
    try:
        return settings.coerce_session_settings(value)
    except TypeError as exc:
        raise InvalidSessionSettingsError(str(exc)) from exc
    except ValueError as exc:  # pydantic's ValidationError
        raise InvalidArgumentError(f"invalid session_settings: {exc}") from exc


def _check_model(model: object) -> None:
    """The ``model`` option: what a recorded usage's model must be, checked at once."""
    if model is None:
        return
    try:
        Usage(model=model)  # type: ignore[arg-type]  # checked here
    except InvalidMessageError as exc:
        raise InvalidArgumentError(str(exc).replace("usage model", "model")) from None


def _latest_items(messages: list[StoredMessage], limit: int) -> list[dict[str, Any]]:
    """The last ``limit`` items of ``messages``, rendering only the messages they come from."""
    chunks: list[list[dict[str, Any]]] = []
    count = 0
    for message in reversed(messages):
        chunks.append(message_to_items(message))
        count += len(chunks[-1])
        if count >= limit:
            break
    return [item for chunk in reversed(chunks) for item in chunk][-limit:]


def _check_limit(limit: Any) -> int | None:
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
        raise InvalidArgumentError(f"limit must be an int or None, got {limit!r}")
    return limit
