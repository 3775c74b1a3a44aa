"""session-actors under the peers' workload: turns on, turns off, and Pydantic AI's path.

Each worker process has one `SessionRegistry` over the SQLite file (``synchronous=FULL``,
the default), default policy. The worker's turns go through session handles, the review
notes through review handles (`registry.review`), as an application would write them.
"""

from __future__ import annotations

import json
from typing import Any

from tests.benchmarks.peers.base import Ack, Loops, System


class TurnsOn(System):
    """``with handle.turn(key=message_id)``: the turn is whole and a redelivery replays."""

    name = "session-actors"
    label = "session-actors, turns on"
    uses_tree = True

    def __init__(self, db: str) -> None:
        super().__init__(db)
        from actors import SessionRegistry
        from persistence import open_store

        self._store = open_store(db)
        self._registry = SessionRegistry(self._store, **self._registry_options())
        self._handles: dict[tuple[str, str], Any] = {}

    def _registry_options(self) -> dict[str, Any]:
        """More arguments of the worker's `SessionRegistry` (the default policy: none)."""
        return {}

    def _handle(self, session: str, kind: str = "session") -> Any:
        key = (session, kind)
        if key not in self._handles:
            self._handles[key] = getattr(self._registry, kind)(session)
        return self._handles[key]

    def setup(self, sessions: list[str]) -> None:
        for session in sessions:
            self._handle(session)

    def _messages(self, ask: int, tags: list[str], *, keyed: bool) -> list[Any]:
        from protocol import Message

        call = f"call-{ask}"
        keys = [f"ask-{ask}-{step}" if keyed else None for step in ("ask", "call", "result", "answer")]
        function = {"name": "lookup", "arguments": json.dumps({"q": tags[1]})}
        return [
            Message("user", tags[0], key=keys[0]),
            Message(
                "assistant", None, tool_calls=[{"id": call, "type": "function", "function": function}], key=keys[1]
            ),
            Message("tool", tags[2], tool_call_id=call, key=keys[2]),
            Message("assistant", tags[3], key=keys[3]),
        ]

    def turn(self, session: str, ask: int, tags: list[str], ack: Ack) -> bool:
        handle = self._handle(session)
        turn = handle.turn(key=f"ask-{ask}")
        with turn:
            if turn.replayed:
                return False
            for message, tag in zip(self._messages(ask, tags, keyed=False), tags, strict=True):
                handle.append(message)
                ack(tag)
        return True

    def note(self, session: str, tag: str, ack: Ack) -> None:
        from protocol import Message

        self._handle(session, "review").append(Message(self.note_role, tag, key=tag.replace(":", "-")))
        ack(tag)

    def read(self, session: str) -> list[str]:
        return [json.dumps([m.content, m.tool_calls], default=str) for m in self._handle(session).transcript()]

    def close(self) -> None:
        self._registry.close()
        self._store.close()


class TurnsOff(TurnsOn):
    """Four keyed appends, no turn: a redelivery stores nothing twice, but the writes of
    other workers and of the review may land between a turn's four."""

    name = "session-actors-no-turns"
    label = "session-actors, turns off"

    def turn(self, session: str, ask: int, tags: list[str], ack: Ack) -> bool:
        handle = self._handle(session)
        for message, tag in zip(self._messages(ask, tags, keyed=True), tags, strict=True):
            handle.append(message)
            ack(tag)
        return True


class PydanticAI(TurnsOn):
    """Pydantic AI's messages through `PydanticAISession`: ``async with s.turn(key=...)``,
    ``await s.add([message])`` per write, ``await s.messages()`` to read."""

    name = "pydantic-ai-via-session-actors"
    label = "Pydantic AI via session-actors"
    distributions = ("pydantic-ai-slim",)

    def __init__(self, db: str) -> None:
        super().__init__(db)
        import pydantic_ai.messages

        self._loops = Loops()

    def _session(self, session: str) -> Any:
        from actors.integrations.pydantic_ai import PydanticAISession

        return PydanticAISession(self._registry, session)

    def _model_messages(self, ask: int, tags: list[str]) -> list[Any]:
        from pydantic_ai.messages import (
            ModelRequest,
            ModelResponse,
            TextPart,
            ToolCallPart,
            ToolReturnPart,
            UserPromptPart,
        )

        call = f"call-{ask}"
        return [
            ModelRequest(parts=[UserPromptPart(content=tags[0])]),
            ModelResponse(parts=[ToolCallPart(tool_name="lookup", args={"q": tags[1]}, tool_call_id=call)]),
            ModelRequest(parts=[ToolReturnPart(tool_name="lookup", content=tags[2], tool_call_id=call)]),
            ModelResponse(parts=[TextPart(content=tags[3])]),
        ]

    async def _turn(self, session: str, ask: int, tags: list[str], ack: Ack) -> bool:
        s = self._session(session)
        async with s.turn(key=f"ask-{ask}") as turn:
            if turn.replayed:
                return False
            for message, tag in zip(self._model_messages(ask, tags), tags, strict=True):
                await s.add([message])
                ack(tag)
        return True

    def turn(self, session: str, ask: int, tags: list[str], ack: Ack) -> bool:
        return bool(self._loops.run(self._turn(session, ask, tags, ack)))

    async def _note(self, session: str, tag: str) -> None:
        from pydantic_ai.messages import ModelResponse, TextPart

        await self._session(session).add([ModelResponse(parts=[TextPart(content=tag)])])

    def note(self, session: str, tag: str, ack: Ack) -> None:
        self._loops.run(self._note(session, tag))
        ack(tag)

    def read(self, session: str) -> list[str]:
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        messages = self._loops.run(self._session(session).messages())
        return [ModelMessagesTypeAdapter.dump_json([m]).decode() for m in messages]

    def close(self) -> None:
        super().close()
        self._loops.close()


class ADK(TurnsOn):
    """Google ADK's events through `actors.integrations.adk.SessionService`: ``async with
    service.turn(..., key=...)``, ``await service.append_event(session, event)`` per write,
    ``await service.get_session(...)`` to read; the events are the ADK row's own."""

    name = "adk-via-session-actors"
    label = "Google ADK via session-actors"
    requirements = ("google-adk==2.13.0",)
    distributions = ("google-adk",)

    def __init__(self, db: str) -> None:
        super().__init__(db)
        from actors.integrations.adk import SessionService

        self._service = SessionService(self._registry)
        self._loops = Loops()

    def _ids(self, session: str) -> dict[str, str]:
        return {"app_name": "bench", "user_id": "user", "session_id": session}

    async def _open(self, session: str) -> Any:
        stored = await self._service.get_session(**self._ids(session))
        return stored if stored is not None else await self._service.create_session(**self._ids(session))

    def setup(self, sessions: list[str]) -> None:
        from protocol import SessionExistsError

        for session in sessions:
            try:
                self._loops.run(self._open(session))
            except SessionExistsError:  # another worker created it between the read and the create
                pass

    async def _turn(self, session: str, ask: int, tags: list[str], ack: Ack) -> bool:
        from tests.benchmarks.peers.others import adk_events

        async with self._service.turn(**self._ids(session), key=f"ask-{ask}") as turn:
            if turn.replayed:
                return False
            stored = await self._open(session)
            for event, tag in zip(adk_events(ask, tags, f"inv-{ask}"), tags, strict=True):
                await self._service.append_event(stored, event)
                ack(tag)
        return True

    def turn(self, session: str, ask: int, tags: list[str], ack: Ack) -> bool:
        return bool(self._loops.run(self._turn(session, ask, tags, ack)))

    async def _note(self, session: str, tag: str) -> None:
        from google.adk.events import Event
        from google.genai import types

        event = Event(
            invocation_id=f"review-{tag}",
            author="review",
            content=types.Content(role="model", parts=[types.Part(text=tag)]),
        )
        await self._service.append_event(await self._open(session), event)

    def note(self, session: str, tag: str, ack: Ack) -> None:
        self._loops.run(self._note(session, tag))
        ack(tag)

    def read(self, session: str) -> list[str]:
        stored = self._loops.run(self._open(session))
        return [event.model_dump_json() for event in stored.events]

    def close(self) -> None:
        super().close()
        self._loops.close()
