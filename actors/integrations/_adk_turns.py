"""The turns that keep each ADK invocation whole.

An invocation's first event opens a turn keyed by its ``invocation_id`` on a handle
of its own; every later event of that invocation is written through that handle, so
other invocations of the session (this process's or another's) wait until it closes
and each invocation's events are contiguous. It closes at the invocation's final
response (an agent's event that `Event.is_final_response` says ends it), when the
task that opened it starts another invocation of the session, when that task ends,
or when its lease lapses. Events of the invocation after a final response (the next
agent of a pipeline) open an unkeyed turn again.

A keyed turn completed before replays: the invocation ran already, so its first
event raises `TurnReplayedError` and the runner stops before it calls a model,
unless the invocation paused on a long-running tool (its last event names one),
which ADK resumes under the same id.

With ``SessionService.plugin()`` in the app, the run's end (ADK's after-run callback)
closes the turn instead of a final response, so every agent of the run is inside it.

``SessionService.turn`` is the explicit form: a turn for the whole block, published
to the task, which every event of any invocation in that task goes through.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol import StoredMessage, TurnReplayedError

from ._adk_events import META_KEY

if TYPE_CHECKING:
    from google.adk.events.event import Event

    from .. import SessionHandle, SessionRegistry, Turn

__all__ = ["SCOPE", "InvocationTurns", "invocation_key"]

logger = logging.getLogger("session_actors.integrations.adk")

#: The explicit turn of the current task: (registry, store session id, the turn's handle).
SCOPE: contextvars.ContextVar[tuple[Any, str, SessionHandle] | None] = contextvars.ContextVar(
    "session_actors_adk_turn", default=None
)


def invocation_key(invocation_id: str) -> str:
    """The turn key of an invocation (a digest: invocation ids follow no key rules)."""
    return "adk-invocation-" + hashlib.sha256(invocation_id.encode()).hexdigest()[:40]


@dataclass
class _Open:
    handle: SessionHandle
    turn: Turn
    task: asyncio.Task[Any] | None


class InvocationTurns:
    """The open invocation turns of one `SessionService`, by (store id, invocation id)."""

    def __init__(self, registry: SessionRegistry, source: str, on_busy: str | None) -> None:
        self._registry = registry
        self._source = source
        self._on_busy = on_busy
        self._open: dict[tuple[str, str], _Open] = {}
        self._finished: set[tuple[str, str]] = set()  # closed at a final response; its task runs on
        self._managed: set[str] = set()  # invocations whose run end the plugin reports

    def scoped(self, store_id: str) -> SessionHandle | None:
        """The handle of this task's explicit turn or open invocation on ``store_id``."""
        scope = SCOPE.get()
        if scope is not None and scope[0] is self._registry and scope[1] == store_id:
            return scope[2]
        task = asyncio.current_task()
        for (held_id, _), run in self._open.items():
            if held_id == store_id and run.task is task:
                return run.handle
        return None

    async def handle_for(self, store_id: str, event: Event) -> tuple[SessionHandle | None, bool]:
        """The handle ``event`` is written through (None: any) and whether a turn was just
        opened for it (the caller's Session object may be stale then)."""
        scope = SCOPE.get()
        if scope is not None and scope[0] is self._registry and scope[1] == store_id:
            return scope[2], False
        if not event.invocation_id:
            return self.scoped(store_id), False
        name = (store_id, event.invocation_id)
        held = self._open.get(name)
        if held is not None:
            return held.handle, False
        task = asyncio.current_task()
        for other, run in list(self._open.items()):
            if other[0] == store_id and run.task is task:  # this task moved on to another invocation
                await self.close(other)
        key = None if name in self._finished else invocation_key(event.invocation_id)
        handle, turn = await self._enter(store_id, key)
        if turn.replayed:
            if not _paused(turn.messages):
                raise TurnReplayedError(
                    store_id,
                    key or "",
                    message=f"invocation {event.invocation_id!r} of {store_id!r} ran before: nothing is written",
                )
            handle, turn = await self._enter(store_id, None)  # ADK resumes a paused invocation
        self._open[name] = _Open(handle, turn, task)
        if task is not None:
            task.add_done_callback(lambda done: self._task_done(done, name))
        return handle, True

    async def after_append(self, store_id: str, event: Event) -> None:
        """An agent's final response closes its invocation's turn (unless the plugin
        reports the run's end)."""
        name = (store_id, event.invocation_id)
        if event.invocation_id in self._managed or name not in self._open:
            return
        if event.author != "user" and event.is_final_response():
            await self.close(name)
            self._finished.add(name)

    def manage(self, invocation_id: str) -> None:
        """The plugin saw the run of ``invocation_id`` start: it will report its end."""
        self._managed.add(invocation_id)

    async def finish(self, store_id: str, invocation_id: str) -> None:
        """The run of ``invocation_id`` ended: its turn closes."""
        self._managed.discard(invocation_id)
        await self.close((store_id, invocation_id))

    async def close(self, name: tuple[str, str]) -> None:
        run = self._open.pop(name, None)
        if run is not None:
            await run.turn.__aexit__(None, None, None)

    async def close_session(self, store_id: str) -> None:
        for name in [name for name in self._open if name[0] == store_id]:
            await self.close(name)

    async def close_all(self) -> None:
        for name in list(self._open):
            await self.close(name)

    async def _enter(self, store_id: str, key: str | None) -> tuple[SessionHandle, Turn]:
        handle = await self._registry.session_async(store_id, source=self._source)
        turn = handle.turn(self._on_busy, key=key)  # type: ignore[arg-type]  # checked by SessionService
        await turn.__aenter__()
        return handle, turn

    def _task_done(self, task: asyncio.Task[Any], name: tuple[str, str]) -> None:
        self._finished.discard(name)
        self._managed.discard(name[1])  # a run that failed never reports its end
        run = self._open.get(name)
        if run is None or run.task is not task:
            return
        del self._open[name]
        try:
            run.turn._close_now()  # from a callback: the actor closes it in order
        except Exception:  # the registry may be closed already: the turn ended with it
            logger.debug("closing an invocation's turn failed", exc_info=True)


def _paused(messages: list[StoredMessage]) -> bool:
    """Did the invocation stop on a long-running tool (ADK resumes it under its id)?"""
    for message in reversed(messages):
        dumped = message.meta.get(META_KEY) if message.meta else None
        if isinstance(dumped, dict):
            return bool(dumped.get("long_running_tool_ids"))
    return False
