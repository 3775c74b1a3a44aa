"""Lineage look-ups shared by the SQLite store's transactions.

Each function takes an open connection inside the caller's transaction, so a
check and the write it guards see one state of the database.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from protocol import (
    END_REASON_COMPRESSION,
    InvalidLineageError,
    LineageForkedError,
    SessionEndedError,
    SessionNotFoundError,
)

from .._rows import other_incarnation

__all__ = ["ended_error", "require_incarnation", "require_session", "resolve"]

Queries = Mapping[str, str]
Row = sqlite3.Row


def require_session(conn: sqlite3.Connection, q: Queries, session_id: str) -> Row:
    row = conn.execute(q["get_session"], {"session_id": session_id}).fetchone()
    if row is None:
        raise SessionNotFoundError(session_id)
    return row


def require_incarnation(conn: sqlite3.Connection, q: Queries, session_id: str, incarnation: str | None) -> Row:
    """The session's row, if it is the conversation the writer means (``incarnation``
    None: any): one erased and started again under the same id is not."""
    row = require_session(conn, q, session_id)
    if incarnation is not None and row["incarnation"] != incarnation:
        raise other_incarnation(session_id)
    return row


def resolve(conn: sqlite3.Connection, q: Queries, session_id: str) -> str:
    """Follow compression-ended sessions to their unique continuation."""
    current = session_id
    seen = {current}
    while True:
        row = require_session(conn, q, current)
        if row["end_reason"] != END_REASON_COMPRESSION:
            return current
        kids = [r["id"] for r in conn.execute(q["child_ids"], {"session_id": current})]
        if not kids:
            return current
        if len(kids) > 1:
            raise LineageForkedError(current, kids)
        if kids[0] in seen:  # only a hand-edited database can loop
            raise InvalidLineageError(kids[0], current, f"lineage cycle through {current!r}")
        current = kids[0]
        seen.add(current)


def ended_error(conn: sqlite3.Connection, q: Queries, row: Row) -> SessionEndedError:
    """The error for writing to an ended session, naming its live successor if unique."""
    successor = None
    if row["end_reason"] == END_REASON_COMPRESSION:
        try:
            tip = resolve(conn, q, row["id"])
        except (LineageForkedError, InvalidLineageError):
            tip = row["id"]
        tip_row = conn.execute(q["get_session"], {"session_id": tip}).fetchone()
        live = tip_row is not None and tip_row["ended_at"] is None
        successor = tip if tip != row["id"] and live else None
    return SessionEndedError(row["id"], successor_id=successor, end_reason=row["end_reason"])
