"""The turns `AgentsSession` keeps a run whole with.

`RunTurn` is ``AgentsSession.turn()``: a turn on a handle of its own, which the
session's calls in the task that opened it use (a context variable) while it is open,
so two concurrent runs of one session object are two turns, one after the other.

`RunTurns` opens one by itself for each run when the session was made with
``run_turns=True``: the SDK passes a session the run's context (``wrapper``) with
every call, so the first call of a run opens the run's turn and every later call of
that run (whatever task makes it) writes through the turn's handle. The SDK never
says that a run ended, so the turn closes when the run saves its final output (an
assistant message last), when the task that opened it ends, or when a call of
another run comes from that task; a run that carries on after what looked like its
end opens a turn again.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .. import SessionHandle, Turn
    from .openai_agents import AgentsSession

__all__ = ["RUN_HANDLE", "RunTurn", "RunTurns"]

logger = logging.getLogger("session_actors.integrations.openai_agents")

#: The handle of the run's turn in the current task (each request's task has its own).
RUN_HANDLE: contextvars.ContextVar[SessionHandle | None] = contextvars.ContextVar("session_actors_run", default=None)


class RunTurn:
    """`AgentsSession.turn`: a turn on a handle of its own (see the module docstring)."""

    def __init__(self, session: AgentsSession, on_busy: str | None, key: str | None = None) -> None:
        self._session = session
        self._on_busy = on_busy
        self._key = key
        self.turn: Turn | None = None
        self.handle: SessionHandle | None = None
        self._token: contextvars.Token[SessionHandle | None] | None = None

    async def open(self) -> Turn:
        from .openai_agents import SOURCE  # loaded already: it imports this module

        session = self._session
        handle = await session._registry.session_async(session.session_id, source=SOURCE)
        turn = handle.turn(self._on_busy, key=self._key)  # type: ignore[arg-type]  # checked by AgentsSession
        await turn.__aenter__()
        self.turn, self.handle = turn, handle
        return turn

    async def __aenter__(self) -> Turn:
        turn = await self.open()
        self._token = RUN_HANDLE.set(self.handle)
        return turn

    async def __aexit__(self, *exc_info: Any) -> None:
        token, self._token = self._token, None
        if token is not None:
            RUN_HANDLE.reset(token)
        await self.close(*exc_info)

    async def close(self, *exc_info: Any) -> None:
        turn, self.turn = self.turn, None
        if turn is not None:
            await turn.__aexit__(*(exc_info or (None, None, None)))

    def close_soon(self) -> None:
        """Close without waiting (from a callback): the actor closes it in order."""
        turn, self.turn = self.turn, None
        if turn is not None:
            turn._close_now()


class RunTurns:
    """The turns ``run_turns=True`` opens, one per run (keyed by the run's context)."""

    def __init__(self, session: AgentsSession) -> None:
        self._session = session
        self._open: dict[int, RunTurn] = {}  # id(run context) -> its turn
        self._by_task: dict[asyncio.Task[Any], int] = {}

    def handle(self, wrapper: Any) -> SessionHandle | None:
        run = None if wrapper is None else self._open.get(id(wrapper))
        return None if run is None else run.handle

    async def enter(self, wrapper: Any) -> None:
        """Before a call with the run context ``wrapper``: the run has its turn."""
        if wrapper is None or RUN_HANDLE.get() is not None or id(wrapper) in self._open:
            return  # no run, an explicit turn, or the run's turn is open
        task = asyncio.current_task()
        previous = self._by_task.get(task) if task is not None else None
        if previous is not None:  # this task moved on to another run
            await self._close(previous)
        run = RunTurn(self._session, self._session.on_busy)
        await run.open()
        key = id(wrapper)
        self._open[key] = run
        try:  # a run context collected before its run saved a final output
            weakref.finalize(wrapper, self._close_soon, key)
        except TypeError:  # not weak-referenceable: the task's end closes it
            pass
        if task is not None:
            self._by_task[task] = key
            task.add_done_callback(self._task_done)

    async def after_add(self, wrapper: Any, items: list[Any]) -> None:
        """The run saved items: its final output ends its turn."""
        if wrapper is not None and id(wrapper) in self._open and items and _final_output(items[-1]):
            await self._close(id(wrapper))

    async def _close(self, key: int) -> None:
        run = self._forget(key)
        if run is not None:
            await run.close()

    def _close_soon(self, key: int) -> None:
        run = self._forget(key)
        if run is not None:
            try:
                run.close_soon()
            except Exception:  # the registry may be closed already: the turn ends with it
                logger.debug("closing a run's turn failed", exc_info=True)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        key = self._by_task.pop(task, None)
        if key is not None:
            self._close_soon(key)

    def _forget(self, key: int) -> RunTurn | None:
        for task, held in list(self._by_task.items()):
            if held == key:
                del self._by_task[task]
        return self._open.pop(key, None)


def _final_output(item: Any) -> bool:
    """Is ``item`` an assistant output message (what ends a run)?"""
    get = item.get if isinstance(item, dict) else lambda name, default=None: getattr(item, name, default)
    return get("role") == "assistant" and get("type", "message") == "message"
