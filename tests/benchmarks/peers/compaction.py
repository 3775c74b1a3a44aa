"""The peers' workload with compaction (``python -m tests.benchmarks peers --compaction``).

Every system that has compaction compacts while the workload runs, by one rule: past
`TRIGGER` live messages, keep the tail from the last user ask that leaves at least `KEEP`
messages, and replace what came before it by one summary from a deterministic stub
compressor that sleeps `PAUSE` seconds (a model call's latency) and lists the tags of the
messages it replaced (a summary of summaries lists theirs too). No network: the SDK's stub
is an HTTP server on 127.0.0.1 in the worker process.

- session-actors: a `SessionRegistry` with `StubCompressor` and a `CompactionPolicy` whose
  token counter counts messages (``max_tokens=TRIGGER``, no cooldown).
- OpenAI Agents SDK: `OpenAIResponsesCompactionSession` over the row's `SQLiteSession`, an
  ``AsyncOpenAI`` client pointed at the stub's ``/v1/responses/compact``, a decision hook
  that says yes past `TRIGGER` items, ``run_compaction()`` after each turn.
- Hermes: the in-place compression's store calls, as ``AIAgent._compress_context`` makes
  them with ``compression.in_place``: under its compression lock, read the active messages,
  the stub compressor, then `SessionDB.archive_and_compact` (soft-archives every active row,
  inserts the compacted set).

What the checker counts (`check`): *lost*, an acknowledged message neither in the live
conversation nor listed by a live summary; *erased*, lost and not in what the system keeps
beside it either (session-actors' ``archive()``, Hermes' inactive rows; the SDK keeps
nothing beside its items, so what it lost is erased).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.benchmarks.peers import others, ours
from tests.benchmarks.peers.base import System

TRIGGER, KEEP, PAUSE = 24, 8, 0.05
SUMMARY = "[summary]"


def cut(roles: Sequence[str]) -> int | None:
    """Where the kept tail starts (a user ask leaving at least `KEEP` messages), or None
    when there is nothing to compact."""
    if len(roles) <= TRIGGER:
        return None
    for at in range(len(roles) - KEEP, 0, -1):
        if roles[at] == "user":
            return at
    return None


def summary(replaced: Sequence[str]) -> str:
    """The stub compressor's summary of the replaced messages' texts: the tags they hold."""
    from tests.benchmarks.peers.workload import TAG

    found = sorted({m.group(0) for text in replaced for m in TAG.finditer(text)})
    return " ".join([SUMMARY, *found])


class Counted:
    """How many times a worker's stub compressor ran (thread-safe)."""

    def __init__(self) -> None:
        self.count, self._lock = 0, threading.Lock()

    def bump(self) -> None:
        with self._lock:
            self.count += 1


class StubCompressor:
    """session-actors' `Compressor`: summary of everything before the tail, then the tail."""

    name = "bench-stub"

    def __init__(self, counted: Counted) -> None:
        self._counted = counted

    def compress(self, messages: Sequence[Any], *, target_tokens: int, cancel: threading.Event) -> list[Any]:
        from protocol import Message

        at = cut([m.role for m in messages])
        if at is None:
            return list(messages)
        time.sleep(PAUSE)
        self._counted.bump()
        text = summary([json.dumps([m.content, m.tool_calls], default=str) for m in messages[:at]])
        return [Message("assistant", text, meta={"synthetic": True}), *messages[at:]]


class TurnsOn(ours.TurnsOn):
    name = "session-actors"

    def __init__(self, db: str) -> None:
        self._counted = Counted()
        super().__init__(db)

    def _registry_options(self) -> dict[str, Any]:
        from actors import CompactionPolicy

        policy = CompactionPolicy(max_tokens=TRIGGER, keep_last=KEEP, cooldown_s=0, token_counter=len)
        return {"compressor": StubCompressor(self._counted), "policy": policy}

    @property
    def compactions(self) -> int:
        return self._counted.count

    def kept(self, session: str) -> list[str]:
        return [json.dumps([m.content, m.tool_calls], default=str) for m in self._handle(session).archive()]


class _Stub(BaseHTTPRequestHandler):
    """``POST /v1/responses/compact``: the summary as an assistant message, then the tail."""

    counted: Counted

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        items = body["input"]
        at = cut([item.get("role", "") for item in items]) or 0
        time.sleep(PAUSE)
        self.counted.bump()
        text = summary([json.dumps(item) for item in items[:at]])
        message = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
        answer = {
            "id": "cmp",
            "created_at": int(time.time()),
            "object": "response.compaction",
            "output": [message, *items[at:]],
            "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class AgentsSDK(others.AgentsSDK):
    label = "OpenAI Agents SDK `OpenAIResponsesCompactionSession`"

    def __init__(self, db: str) -> None:
        super().__init__(db)
        from openai import AsyncOpenAI

        self._counted = Counted()
        handler = type("Stub", (_Stub,), {"counted": self._counted})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, name="compact-stub", daemon=True).start()
        url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._client = AsyncOpenAI(base_url=url, api_key="stub", max_retries=0)
        self._compacting: dict[str, Any] = {}

    @property
    def compactions(self) -> int:
        return self._counted.count

    def _wrapped(self, session: str) -> Any:
        from agents.memory import OpenAIResponsesCompactionSession

        if session not in self._compacting:  # the worker's thread only (turns)
            self._compacting[session] = OpenAIResponsesCompactionSession(
                session,
                self._session(session),
                client=self._client,
                should_trigger_compaction=lambda context: len(context["session_items"]) > TRIGGER,
            )
        return self._compacting[session]

    def turn(self, session: str, ask: int, tags: list[str], ack: Any) -> bool:
        wrapped = self._wrapped(session)
        for item, tag in zip(self._items(ask, tags), tags, strict=True):
            self._loops.run(wrapped.add_items([item]))
            ack(tag)
        self._loops.run(wrapped.run_compaction())
        return True

    def kept(self, session: str) -> list[str]:
        return []

    def close(self) -> None:
        super().close()
        self._server.shutdown()
        self._server.server_close()


class Hermes(others.Hermes):
    label = "Hermes `SessionDB`, in-place compression"

    def __init__(self, db: str) -> None:
        super().__init__(db)
        self._counted = Counted()

    @property
    def compactions(self) -> int:
        return self._counted.count

    def turn(self, session: str, ask: int, tags: list[str], ack: Any) -> bool:
        super().turn(session, ask, tags, ack)
        self._compress(session)
        return True

    def _compress(self, session: str) -> None:
        """Under Hermes' compression lock (held elsewhere: sit this one out, as Hermes does);
        the messages are read after it is taken, later than the agent's own list would be."""
        holder = f"bench-{os.getpid()}-{threading.get_ident()}"
        if not self._db.try_acquire_compression_lock(session, holder, ttl_seconds=300.0):
            return
        try:
            messages = self._db.get_messages(session)
            at = cut([m["role"] for m in messages])
            if at is None:
                return
            time.sleep(PAUSE)
            self._counted.bump()
            text = summary([json.dumps(m, default=str) for m in messages[:at]])
            fields = ("role", "content", "tool_calls", "tool_call_id", "tool_name")
            tail = [{k: m[k] for k in fields if m.get(k) is not None} for m in messages[at:]]
            self._db.archive_and_compact(session, [{"role": "assistant", "content": text}, *tail])
        finally:
            self._db.release_compression_lock(session, holder)

    def kept(self, session: str) -> list[str]:
        return [json.dumps(m, default=str) for m in self._db.get_messages(session, include_inactive=True)]


#: the systems that compact, by the row they stand for; a row not here shows "n/a" and why
ROWS: dict[str, type[System]] = {"session-actors": TurnsOn, "agents-sdk": AgentsSDK, "hermes": Hermes}
WITHOUT = {
    "session-actors-no-turns": "compacts through the same registry as session-actors' row (not run twice)",
    "pydantic-ai-via-session-actors": "compacts through the same registry as session-actors' row (not run twice)",
    "adk-via-session-actors": "compacts through the same registry as session-actors' row (not run twice)",
    "adk": "compacts inside its Runner with a model's summary (`EventsCompactionConfig`); this row drives the session service",
    "langgraph": "no compaction of its own: users write a summarize node",
}
