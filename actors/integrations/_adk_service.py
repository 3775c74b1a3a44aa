"""`SessionService`: Google ADK's ``BaseSessionService`` over a `SessionRegistry`.

Imported by `actors.integrations.adk` on first use of the name (it imports ADK).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError as AdkSessionNotFoundError
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session

from persistence.internal import check_metadata_patch
from protocol import SessionExistsError, SessionInfo, SessionNotFoundError, StoredMessage

from ..compaction._policy import OnBusy, check_on_busy
from ._adk_events import from_messages, store_id, to_message
from ._adk_plugin import RunTurnsPlugin
from ._adk_state import (
    APP,
    USER,
    app_state_id,
    read_state,
    scoped_state,
    split_delta,
    state_patch,
    user_state_id,
    write_scoped,
)
from ._adk_turns import SCOPE, InvocationTurns

if TYPE_CHECKING:
    from .. import SessionHandle, SessionRegistry, Turn

__all__ = ["SOURCE", "SessionAlreadyExistsError", "SessionService", "UnknownSessionError"]

#: The ``source`` of sessions this service creates (``session-actors sessions --source``).
SOURCE = "adk"


class SessionAlreadyExistsError(AlreadyExistsError, SessionExistsError):
    """`create_session` with a taken id: ADK's ``AlreadyExistsError`` and ours."""

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)


class UnknownSessionError(AdkSessionNotFoundError, SessionNotFoundError):
    """`append_event` to a session that is not stored: ADK's ``SessionNotFoundError`` and ours."""

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)


class SessionService(BaseSessionService):
    """ADK sessions kept by a `SessionRegistry` (see docs/adk.md).

    Events are appended through the session's actor and come back equal; session state
    is kept in the session's metadata, ``app:`` and ``user:`` state in sessions of
    their own, ``temp:`` state only in the caller's ``Session``. Each invocation is a
    keyed turn (see `actors.integrations._adk_turns`). A ``Session`` object is never
    refused as stale: an invocation that waited for another one catches up first.
    ``on_busy`` (None: the registry policy's) is what an invocation's turn does when
    another is open. `close` does not close the registry."""

    def __init__(self, registry: SessionRegistry, *, on_busy: OnBusy | None = None) -> None:
        if on_busy is not None:
            check_on_busy(on_busy)
        self.registry = registry
        self.on_busy = on_busy
        self._turns = InvocationTurns(registry, SOURCE, on_busy)

    def __repr__(self) -> str:
        return f"SessionService({self.registry!r})"

    # -- BaseSessionService ---------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        session_id = (session_id or "").strip() or str(uuid.uuid4())
        sid = store_id(app_name, user_id, session_id)
        app, user, own = split_delta(state)
        now = time.time()
        metadata = {"adk_app": app_name, "adk_user": user_id, "adk_session": session_id, "adk_updated": now}
        metadata.update(state_patch(own))
        check_metadata_patch({**metadata, **state_patch(app), **state_patch(user)})  # nothing written yet
        store = self.registry.store
        try:
            await asyncio.to_thread(store.create_session, sid, source=SOURCE, metadata=metadata)
        except SessionExistsError:
            raise SessionAlreadyExistsError(f"Session with id {session_id} already exists.") from None
        await asyncio.to_thread(self._write_scoped, app_name, user_id, app, user)
        session = await self.get_session(app_name=app_name, user_id=user_id, session_id=session_id)
        if session is None:  # erased by another path in between
            raise UnknownSessionError(f"Session {session_id} was deleted while it was created.")
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        sid = store_id(app_name, user_id, session_id.strip())
        info = await asyncio.to_thread(self._info, sid)
        if info is None:
            return None
        events = _filtered(await self._events(sid), config)
        state = await asyncio.to_thread(self._state, info)
        return Session(
            id=info.metadata["adk_session"],
            app_name=app_name,
            user_id=user_id,
            state=state,
            events=events,
            last_update_time=info.metadata["adk_updated"],
        )

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        wanted: dict[str, Any] = {"adk_app": app_name}
        if user_id is not None:
            wanted["adk_user"] = user_id
        store = self.registry.store
        infos = await asyncio.to_thread(store.sessions, live=True, source=SOURCE, metadata=wanted)
        sessions = await asyncio.to_thread(self._listed, infos)
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        sid = store_id(app_name, user_id, session_id.strip())
        await self._turns.close_session(sid)
        with contextlib.suppress(SessionNotFoundError):  # deleting what is gone is done
            await self.registry.delete_async(sid)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(scoped_state, self.registry.store, user_state_id(app_name, user_id))

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        sid = store_id(session.app_name, session.user_id, session.id)
        if await asyncio.to_thread(self._info, sid) is None:
            raise UnknownSessionError(f"Session {session.id} not found.")
        handle, opened = await self._turns.handle_for(sid, event)
        if opened:  # it may have waited for another invocation: catch up first
            await self._catch_up(session, sid, handle)
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await self._write(sid, session, event, handle)
        self._commit_event_to_session(session, event)
        session.last_update_time = event.timestamp
        await self._turns.after_append(sid, event)
        return event

    # -- the explicit turn ------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def turn(
        self, *, app_name: str, user_id: str, session_id: str, key: str | None = None, on_busy: OnBusy | None = None
    ) -> AsyncIterator[Turn]:
        """A turn around a whole ``Runner.run_async``: ``async with service.turn(app_name=...,
        user_id=..., session_id=..., key=message_id) as turn:``. Every event this task
        appends to that session inside it is the turn's; others wait until it closes.
        With ``key`` the block runs once: a turn of that key completed before opens
        nothing, ``turn.replayed`` is True and ``turn.messages`` are its stored messages
        (`events` renders them); appends inside it raise `TurnReplayedError`."""
        if on_busy is not None:
            check_on_busy(on_busy)
        sid = store_id(app_name, user_id, session_id.strip())
        handle = await self.registry.session_async(sid, source=SOURCE)
        turn = handle.turn(on_busy or self.on_busy, key=key)
        await turn.__aenter__()  # yields the handle: the block wants the Turn (replayed, messages)
        token = SCOPE.set((self.registry, sid, handle))
        try:
            yield turn
        except BaseException as exc:
            SCOPE.reset(token)
            await turn.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        SCOPE.reset(token)
        await turn.__aexit__(None, None, None)

    def plugin(self) -> BasePlugin:
        """An ADK plugin for the app (``App(..., plugins=[service.plugin()])``): each run's
        turn then closes when the run ends, not at an agent's final response, so a run of
        several agents (a ``SequentialAgent``) stays contiguous too."""
        return RunTurnsPlugin(self._turns)

    @staticmethod
    def events(messages: list[StoredMessage]) -> list[Event]:
        """ADK events for stored messages (a replayed turn's ``messages``)."""
        return from_messages(messages)

    async def close(self) -> None:
        """Close the invocations this service holds open (the registry stays open)."""
        await self._turns.close_all()

    # -- plumbing ---------------------------------------------------------------------------

    def _info(self, sid: str) -> SessionInfo | None:
        store = self.registry.store
        info: SessionInfo | None = store.get_session(sid)
        if info is not None and not info.live:  # compacted by rotation: the tip holds it now
            info = store.get_session(store.resolve(sid))
        return info

    def _state(self, info: SessionInfo, scoped: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """The session's state: its own, then ``app:`` and ``user:`` state (read once per
        holder when ``scoped`` caches them across the sessions of a listing)."""
        meta = info.metadata
        state = read_state(meta)
        holders = ((APP, app_state_id(meta["adk_app"])), (USER, user_state_id(meta["adk_app"], meta["adk_user"])))
        for prefix, holder in holders:
            if scoped is None or holder not in scoped:
                values = scoped_state(self.registry.store, holder)
                if scoped is not None:
                    scoped[holder] = values
            else:
                values = scoped[holder]
            state.update({prefix + key: value for key, value in values.items()})
        return state

    def _listed(self, infos: list[SessionInfo]) -> list[Session]:
        scoped: dict[str, dict[str, Any]] = {}
        return [
            Session(
                id=info.metadata["adk_session"],
                app_name=info.metadata["adk_app"],
                user_id=info.metadata["adk_user"],
                state=self._state(info, scoped),
                events=[],
                last_update_time=info.metadata["adk_updated"],
            )
            for info in infos
        ]

    def _write_scoped(self, app_name: str, user_id: str, app: dict[str, Any], user: dict[str, Any]) -> None:
        store = self.registry.store
        write_scoped(store, app_state_id(app_name), app)
        write_scoped(store, user_state_id(app_name, user_id), user)

    async def _events(self, sid: str) -> list[Event]:
        handle = self._turns.scoped(sid)
        if handle is None:
            handle = await self.registry.session_async(sid, source=SOURCE)
        return from_messages(await handle.transcript_async())

    async def _write(self, sid: str, session: Session, event: Event, handle: SessionHandle | None) -> None:
        # everything checked before anything is written
        message = to_message(event)
        app, user, own = split_delta(event.actions.state_delta if event.actions else None)
        patch = {"adk_updated": event.timestamp, **state_patch(own)}
        check_metadata_patch({**patch, **state_patch(app), **state_patch(user)})
        if handle is None:
            handle = await self.registry.session_async(sid, source=SOURCE)
        await handle.append_async(message)
        store = self.registry.store

        def write_state() -> None:
            store.update_metadata(store.resolve(sid), patch)
            self._write_scoped(session.app_name, session.user_id, app, user)

        await asyncio.to_thread(write_state)

    async def _catch_up(self, session: Session, sid: str, handle: SessionHandle | None) -> None:
        """Bring a ``Session`` read before another invocation ran up to date, in place."""
        stored = await self._events(sid)
        last = session.events[-1].id if session.events else None
        if (stored[-1].id if stored else None) == last:
            return
        ids = [event.id for event in stored]
        newer = stored[ids.index(last) + 1 :] if last in ids else stored
        if last not in ids:
            session.events.clear()
        session.events.extend(newer)
        info = await asyncio.to_thread(self._info, sid)
        if info is not None:
            temp = {key: value for key, value in session.state.items() if key.startswith("temp:")}
            session.state.clear()
            session.state.update(await asyncio.to_thread(self._state, info))
            session.state.update(temp)
            session.last_update_time = info.metadata["adk_updated"]


def _filtered(events: list[Event], config: GetSessionConfig | None) -> list[Event]:
    """``GetSessionConfig``'s filters as ADK's services apply them: the latest
    ``num_recent_events``, then those from ``after_timestamp`` on."""
    if config is None:
        return events
    if config.num_recent_events is not None:
        events = events[-config.num_recent_events :] if config.num_recent_events else []
    if config.after_timestamp is not None:
        first = len(events)
        while first > 0 and events[first - 1].timestamp >= config.after_timestamp:
            first -= 1
        events = events[first:]
    return events
