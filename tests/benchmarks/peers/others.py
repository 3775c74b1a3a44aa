"""Other frameworks' session stores under the peers' workload, each driven as its users do,
on SQLite with ``synchronous=FULL`` (set on every connection the adapter can reach).

- OpenAI Agents SDK: one `SQLiteSession` per session per worker, one ``add_items`` per
  message, in the Responses item shape.
- Hermes: one `SessionDB` per worker, ``append_message`` per message (the ask with its
  ``platform_message_id``).
- Google ADK: `DatabaseSessionService`, the Runner's sequence (``get_session``, then
  ``append_event`` per message), reloading and retrying up to 5 times on `StaleSessionError`
  (each one counted as an error raised).
- LangGraph: a `StateGraph` over ``add_messages`` with a `SqliteSaver`, one ``invoke`` per
  turn on the session's thread (its node answers with the tool call, result and answer);
  the review note by ``update_state``.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from tests.benchmarks.peers.base import Ack, Loops, System

APP, USER = "bench", "user"


class AgentsSDK(System):
    name = "agents-sdk"
    label = "OpenAI Agents SDK SQLiteSession"
    requirements = ("openai-agents==0.24.0",)
    distributions = ("openai-agents",)

    def __init__(self, db: str) -> None:
        super().__init__(db)
        from agents import SQLiteSession

        class FullSync(SQLiteSession):  # type: ignore[misc, valid-type]
            @staticmethod
            def _configure_connection(conn: Any) -> None:
                SQLiteSession._configure_connection(conn)
                conn.execute("PRAGMA synchronous=FULL")

        self._make, self._sessions, self._lock = FullSync, {}, threading.Lock()
        self._loops = Loops()

    def _session(self, session: str) -> Any:
        with self._lock:
            if session not in self._sessions:
                self._sessions[session] = self._make(session, self.db)
            return self._sessions[session]

    def setup(self, sessions: list[str]) -> None:
        self._session(sessions[0])

    @staticmethod
    def _items(ask: int, tags: list[str]) -> list[dict[str, Any]]:
        call = f"call-{ask}"
        return [
            {"role": "user", "content": tags[0]},
            {"type": "function_call", "call_id": call, "name": "lookup", "arguments": json.dumps({"q": tags[1]})},
            {"type": "function_call_output", "call_id": call, "output": tags[2]},
            {"role": "assistant", "content": tags[3]},
        ]

    def turn(self, session: str, ask: int, tags: list[str], ack: Ack) -> bool:
        s = self._session(session)
        for item, tag in zip(self._items(ask, tags), tags, strict=True):
            self._loops.run(s.add_items([item]))
            ack(tag)
        return True

    def note(self, session: str, tag: str, ack: Ack) -> None:
        self._loops.run(self._session(session).add_items([{"role": self.note_role, "content": tag}]))
        ack(tag)

    def read(self, session: str) -> list[str]:
        return [json.dumps(item, default=str) for item in self._loops.run(self._session(session).get_items())]

    def close(self) -> None:
        for s in self._sessions.values():
            s.close()
        self._loops.close()


class Hermes(System):
    name = "hermes"
    label = "Hermes SessionDB"
    requirements = ("hermes-agent==0.19.0",)
    distributions = ("hermes-agent",)

    def __init__(self, db: str) -> None:
        super().__init__(db)
        from pathlib import Path

        from hermes_state import SessionDB

        self._db = SessionDB(db_path=Path(db))
        with self._db._lock:  # its one connection: no public way to set the pragma
            self._db._conn.execute("PRAGMA synchronous=FULL")

    def setup(self, sessions: list[str]) -> None:
        for session in sessions:
            self._db.create_session(session, source="bench")

    def turn(self, session: str, ask: int, tags: list[str], ack: Ack) -> bool:
        call = f"call-{ask}"
        function = {"name": "lookup", "arguments": json.dumps({"q": tags[1]})}
        self._db.append_message(session, "user", tags[0], platform_message_id=f"ask-{ask}")
        ack(tags[0])
        self._db.append_message(
            session, "assistant", "", tool_calls=[{"id": call, "type": "function", "function": function}]
        )
        ack(tags[1])
        self._db.append_message(session, "tool", tags[2], tool_name="lookup", tool_call_id=call)
        ack(tags[2])
        self._db.append_message(session, "assistant", tags[3])
        ack(tags[3])
        return True

    def note(self, session: str, tag: str, ack: Ack) -> None:
        self._db.append_message(session, self.note_role, tag)
        ack(tag)

    def read(self, session: str) -> list[str]:
        return [json.dumps(m, default=str) for m in self._db.get_messages(session)]

    def close(self) -> None:
        self._db.close()


class ADK(System):
    name = "adk"
    label = "Google ADK DatabaseSessionService"
    requirements = ("google-adk[db]==2.13.0",)
    distributions = ("google-adk",)
    retries = 5

    def __init__(self, db: str) -> None:
        super().__init__(db)
        import google.adk.sessions

        self._local = threading.local()
        self._services: list[Any] = []
        self._loops = Loops()

    def _service(self) -> Any:  # one per thread: an async engine belongs to its event loop
        service = getattr(self._local, "service", None)
        if service is None:
            from google.adk.sessions import DatabaseSessionService
            from sqlalchemy import event

            service = self._local.service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{self.db}")
            event.listen(service.db_engine.sync_engine, "connect", _full_sync)
            self._services.append((service, self._loops))
        return service

    def setup(self, sessions: list[str]) -> None:
        for session in sessions:
            self._loops.run(self._service().create_session(app_name=APP, user_id=USER, session_id=session))

    async def _append(self, session: str, event: Any) -> None:
        service = self._service()
        for attempt in range(self.retries + 1):
            stored = await service.get_session(app_name=APP, user_id=USER, session_id=session)
            try:
                await service.append_event(stored, event)
                return
            except Exception as exc:
                if type(exc).__name__ != "StaleSessionError" or attempt == self.retries:
                    raise
                self.errors += 1

    async def _turn(self, session: str, ask: int, tags: list[str], ack: Ack) -> None:
        for event, tag in zip(adk_events(ask, tags, f"inv-{ask}"), tags, strict=True):
            await self._append(session, event)
            ack(tag)

    def turn(self, session: str, ask: int, tags: list[str], ack: Ack) -> bool:
        self._loops.run(self._turn(session, ask, tags, ack))
        return True

    def note(self, session: str, tag: str, ack: Ack) -> None:
        from google.adk.events import Event
        from google.genai import types

        event = Event(
            invocation_id=f"review-{tag}",
            author="review",
            content=types.Content(role="model", parts=[types.Part(text=tag)]),
        )
        self._loops.run(self._append(session, event))
        ack(tag)

    def read(self, session: str) -> list[str]:
        stored = self._loops.run(self._service().get_session(app_name=APP, user_id=USER, session_id=session))
        return [event.model_dump_json() for event in stored.events]

    def close(self) -> None:
        for service, loops in self._services:
            try:
                loops.run(service.close())
            except RuntimeError:  # its thread's loop: closed with the thread's work done
                pass
        self._loops.close()


def adk_events(ask: int, tags: list[str], invocation: str) -> list[Any]:
    """A turn's four ADK events (ask, function call, function response, answer)."""
    from google.adk.events import Event
    from google.genai import types

    call = f"call-{ask}"
    parts = [
        ("user", types.Part(text=tags[0])),
        ("model", types.Part(function_call=types.FunctionCall(id=call, name="lookup", args={"q": tags[1]}))),
        (
            "user",
            types.Part(function_response=types.FunctionResponse(id=call, name="lookup", response={"r": tags[2]})),
        ),
        ("model", types.Part(text=tags[3])),
    ]
    return [
        Event(
            invocation_id=invocation,
            author="user" if role == "user" else "agent",
            content=types.Content(role=role, parts=[part]),
        )
        for role, part in parts
    ]


def _full_sync(dbapi_connection: Any, record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()


class LangGraph(System):
    name = "langgraph"
    label = "LangGraph SqliteSaver"
    requirements = ("langgraph==1.2.22", "langgraph-checkpoint-sqlite==3.1.2")
    distributions = ("langgraph", "langgraph-checkpoint-sqlite")

    def __init__(self, db: str) -> None:
        super().__init__(db)
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        self._conn = sqlite3.connect(db, check_same_thread=False, timeout=30)
        self._saver = SqliteSaver(self._conn)
        self._saver.setup()
        self._conn.execute("PRAGMA synchronous=FULL")
        self._graph = _graph(self._saver)

    def setup(self, sessions: list[str]) -> None:
        pass  # a thread starts with its first checkpoint

    def turn(self, session: str, ask: int, tags: list[str], ack: Ack) -> bool:
        from langchain_core.messages import HumanMessage

        self._graph.invoke({"messages": [HumanMessage(content=tags[0])]}, _config(session))
        for tag in tags:
            ack(tag)
        return True

    def note(self, session: str, tag: str, ack: Ack) -> None:
        from langchain_core.messages import AIMessage

        self._graph.update_state(_config(session), {"messages": [AIMessage(content=tag)]})
        ack(tag)

    def read(self, session: str) -> list[str]:
        state = self._graph.get_state(_config(session))
        return [m.model_dump_json() for m in state.values.get("messages", [])]

    def forks(self, sessions: list[str]) -> int:
        forks = 0
        for session in sessions:
            children: dict[str, int] = {}
            for snapshot in self._saver.list(_config(session)):
                parent = snapshot.parent_config
                if parent is not None:
                    key = parent["configurable"]["checkpoint_id"]
                    children[key] = children.get(key, 0) + 1
            forks += sum(n - 1 for n in children.values() if n > 1)
        return forks

    def close(self) -> None:
        self._conn.close()


def _config(session: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": session}}


def _graph(saver: Any) -> Any:
    """``add_messages`` state; one node answers an ask with a tool call, its result and the
    answer, tagged with the ask's number."""
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def agent(state: MessagesState) -> dict[str, Any]:
        ask = state["messages"][-1].content.split(":")[0]
        call = f"call-{ask}"
        return {
            "messages": [
                AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"q": f"{ask}:call"}, "id": call}]),
                ToolMessage(content=f"{ask}:result", tool_call_id=call),
                AIMessage(content=f"{ask}:answer"),
            ]
        }

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    return graph.compile(checkpointer=saver)
