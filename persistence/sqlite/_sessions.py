"""Session rows and appends on SQLite: transaction bodies of an open connection.

Write bodies run inside the writer's transaction (a SAVEPOINT of a group commit);
they raise our errors, and raising rolls back everything the body wrote.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from protocol import END_REASON_COMPRESSION, InvalidLineageError, SessionExistsError

from .._rows import new_incarnation
from ._lineage import ended_error, require_incarnation, require_session

__all__ = ["append_rows", "create_session", "end_session", "insert_rows", "reserve_seqs"]

Queries = Mapping[str, str]
Row = sqlite3.Row


def create_session(
    conn: sqlite3.Connection,
    q: Queries,
    session_id: str,
    source: str,
    parent_session_id: str | None,
    now: float,
    metadata: str = "{}",
) -> Row:
    incarnation = new_incarnation()
    if parent_session_id is not None:  # the parent first, as on PostgreSQL
        parent = require_session(conn, q, parent_session_id)
        if parent["end_reason"] != END_REASON_COMPRESSION:
            raise InvalidLineageError(session_id, parent_session_id)
        incarnation = parent["incarnation"]  # a continuation of the same conversation
    if conn.execute(q["get_session"], {"session_id": session_id}).fetchone() is not None:
        raise SessionExistsError(session_id)
    conn.execute(
        q["insert_session"],
        {
            "session_id": session_id,
            "source": source,
            "parent_session_id": parent_session_id,
            "now": now,
            "metadata": metadata,
            "incarnation": incarnation,
        },
    )
    return require_session(conn, q, session_id)


def end_session(conn: sqlite3.Connection, q: Queries, session_id: str, reason: str, now: float) -> Row:
    row = require_session(conn, q, session_id)
    if row["ended_at"] is not None:
        if row["end_reason"] == reason:
            return row  # idempotent
        raise ended_error(conn, q, row)
    conn.execute(q["end_session"], {"session_id": session_id, "reason": reason, "now": now})
    return require_session(conn, q, session_id)


def insert_rows(
    conn: sqlite3.Connection,
    q: Queries,
    session_id: str,
    params: Sequence[Mapping[str, Any]],
    now: float,
    first_seq: int,
    origins: Sequence[int | None] | None = None,
) -> list[int]:
    """Insert rows at seqs ``first_seq``... (already reserved on the session row); their ids."""
    ids: list[int] = []
    for offset, p in enumerate(params):
        origin = origins[offset] if origins else None
        row = {**p, "session_id": session_id, "seq": first_seq + offset, "now": now, "origin_id": origin}
        ids.append(conn.execute(q["insert_message"], row).lastrowid or 0)  # set by every INSERT
    return ids


def reserve_seqs(conn: sqlite3.Connection, q: Queries, session_id: str, count: int) -> int:
    """Move the session's seq counter by ``count`` in this transaction: seqs stay gapless."""
    return conn.execute(q["advance_next_seq"], {"session_id": session_id, "count": count}).fetchone()["first_seq"]


def append_rows(
    conn: sqlite3.Connection,
    q: Queries,
    session_id: str,
    params: Sequence[Mapping[str, Any]],
    now: float,
    incarnation: str | None = None,
) -> tuple[int, list[int]]:
    """Append in the writer's transaction; returns ``(first_seq, ids)``. Kept lean: it
    runs on the single writer thread, so every statement here costs all callers."""
    reserved = conn.execute(
        q["advance_live_next_seq"],
        {"session_id": session_id, "count": len(params), "incarnation": incarnation},
    ).fetchone()
    if reserved is None:  # unknown, another incarnation, or ended: find out which
        row = require_incarnation(conn, q, session_id, incarnation)
        raise ended_error(conn, q, row)
    first_seq = reserved["first_seq"]
    return first_seq, insert_rows(conn, q, session_id, params, now, first_seq)
