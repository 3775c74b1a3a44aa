"""LISTEN/NOTIFY hints of committed compactions and closed turns (PostgreSQL only).

Every `commit_compaction` queues a NOTIFY on ``session_actors_compaction``, every
`close_turn` one on ``session_actors_turn``; the server delivers them on COMMIT. A
`CompactionListener` (a `TurnListener`) holds one dedicated connection that LISTENs
and yields the events of its own schema. They are hints to look sooner, never the
only signal: a listener that was not connected when a commit happened never hears
of it, so readers still check the store (a registry polls its held calls anyway).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from protocol import ConfigurationError, TranscriptError

from ._driver import import_driver, redact_url

__all__ = ["CHANNEL", "CompactionEvent", "CompactionListener", "TurnListener"]

log = logging.getLogger("session_actors.pg_notify")

CHANNEL = "session_actors_compaction"


@dataclass(frozen=True, slots=True)
class CompactionEvent:
    """One committed compaction, as announced by NOTIFY."""

    session_id: str
    child_session_id: str | None
    mode: str
    token: int


class CompactionListener:
    """A LISTENing connection; use as a context manager, or call `close`."""

    _LISTEN = "listen_compactions"

    def __init__(self, url: str, queries: Any, *, connect_timeout_s: float = 5.0) -> None:
        psycopg, _ = import_driver()
        self._psycopg = psycopg
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(connect_timeout_s)))
        except psycopg.Error as exc:
            raise ConfigurationError(f"cannot connect to {redact_url(url)}: {exc}") from exc
        try:
            self._schema = self._conn.execute(queries["current_schema"]).fetchone()[0]
            self._conn.execute(queries[self._LISTEN])
        except psycopg.Error as exc:
            self._conn.close()
            raise TranscriptError(f"LISTEN failed: {exc}") from exc

    def __enter__(self) -> CompactionListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait(self, timeout_s: float, *, max_events: int | None = None) -> list[CompactionEvent]:
        """Events of this schema received within ``timeout_s`` (stops early after ``max_events``)."""
        events: list[CompactionEvent] = []
        try:
            for note in self._conn.notifies(timeout=timeout_s):
                event = self._parse(note.payload)
                if event is not None:
                    events.append(event)
                    if max_events is not None and len(events) >= max_events:
                        break
        except self._psycopg.Error as exc:
            raise TranscriptError(f"listening for compactions failed: {exc}") from exc
        return events

    def _parse(self, payload: str) -> CompactionEvent | None:
        try:
            data = json.loads(payload)
        except ValueError:
            log.warning("ignoring a malformed compaction notification: %r", payload[:200])
            return None
        if data.get("schema") != self._schema:
            return None  # channels are database-wide; another schema's store
        return CompactionEvent(data["session_id"], data.get("child_session_id"), data["mode"], int(data["token"]))

    def close(self) -> None:
        """Close the listening connection. Idempotent."""
        self._conn.close()


class TurnListener(CompactionListener):
    """A LISTENing connection for closed turns: `wait_closed` returns the ids of the
    sessions whose turn closed (this schema's)."""

    _LISTEN = "listen_turns"

    def wait_closed(self, timeout_s: float) -> set[str]:
        closed: set[str] = set()
        try:
            for note in self._conn.notifies(timeout=timeout_s, stop_after=1):
                data = _payload(note.payload)
                if data is not None and data.get("schema") == self._schema:
                    closed.add(str(data.get("session_id")))
        except self._psycopg.Error as exc:
            raise TranscriptError(f"listening for closed turns failed: {exc}") from exc
        return closed


def _payload(payload: str) -> dict[str, Any] | None:
    try:
        data = json.loads(payload)
    except ValueError:
        log.warning("ignoring a malformed notification: %r", payload[:200])
        return None
    return data if isinstance(data, dict) else None
