"""Session rows and appends on SQLite: transaction bodies of an open connection.

Write bodies run inside the writer's transaction (a SAVEPOINT of a group commit);
they raise our errors, and raising rolls back everything the body wrote.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from protocol import (
    SessionExistsError,
    StoredMessage,
)

from .. import _keys as keys
from .._rows import stored_message_from_row
from ..sql._lineage import ended_error, require_incarnation
from ..sql._turns import turn_held
from ._checksums import row_checksum

__all__ = [
    "append_rows",
    "insert_rows",
    "insert_sessions",
    "keyed_append",
    "reserve_seqs",
    "stored_by_key",
]

Queries = Mapping[str, str]
Row = sqlite3.Row


def insert_sessions(
    conn: sqlite3.Connection, q: Queries, rows: list[tuple[str, str, str, str]], now: float
) -> dict[str, Row]:
    """`Dialect.insert_sessions`: (id, source, metadata JSON text, incarnation) rows
    inserted in the order given; their rows by id. An id taken raises
    `SessionExistsError` (the first in that order) before anything is written."""
    ids = json.dumps([row[0] for row in rows])
    taken = conn.execute(q["first_taken"], {"ids": ids}).fetchone()
    if taken is not None:
        raise SessionExistsError(taken["id"])
    conn.executemany(
        q["insert_session"],
        (
            {
                "session_id": sid,
                "source": source,
                "parent_session_id": None,
                "now": now,
                "metadata": metadata,
                "incarnation": incarnation,
            }
            for sid, source, metadata, incarnation in rows
        ),
    )
    return {row["id"]: row for row in conn.execute(q["sessions_by_id"], {"ids": ids})}


def insert_rows(
    conn: sqlite3.Connection,
    q: Queries,
    session_id: str,
    params: Sequence[Mapping[str, Any]],
    now: float,
    first_seq: int,
    origins: Sequence[int | None] | None = None,
    turn: int | None = None,
) -> list[int]:
    """Insert rows at seqs ``first_seq``... (already reserved on the session row); their
    ids. ``turn``: the turn lease they are appended under, unless a row names its own
    (a copy keeps its original's)."""
    ids: list[int] = []
    for offset, p in enumerate(params):
        origin = origins[offset] if origins else None
        row = {
            "turn": turn,
            "key": None,
            "usage": None,
            **p,
            "session_id": session_id,
            "seq": first_seq + offset,
            "now": now,
        }
        row["origin_id"] = origin
        row["checksum"] = row_checksum(row)
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
    turn: int | None = None,
) -> tuple[int, list[int]]:
    """Append in the writer's transaction; returns ``(first_seq, ids)``. Kept lean: it
    runs on the single writer thread, so every statement here costs all callers.
    The seq counter's UPDATE is the check: it matches only a live session of the
    incarnation meant that holds no turn, or the live one this append carries
    (``turn``: the token of the lease it is made under)."""
    reserved = conn.execute(
        q["advance_live_next_seq"],
        {"session_id": session_id, "count": len(params), "incarnation": incarnation, "turn": turn, "now": now},
    ).fetchone()
    if reserved is None:  # unknown, another incarnation, ended or in another's turn: find out which
        row = require_incarnation(conn, q, session_id, incarnation)
        if row["ended_at"] is None:
            raise turn_held(conn, q, session_id, turn, now)
        raise ended_error(conn, q, session_id)
    first_seq = reserved["first_seq"]
    return first_seq, insert_rows(conn, q, session_id, params, now, first_seq, turn=turn)


def keyed_append(
    conn: sqlite3.Connection,
    q: Queries,
    session_id: str,
    params: Sequence[Mapping[str, Any]],
    now: float,
    incarnation: str | None = None,
    turn: int | None = None,
) -> list[StoredMessage]:
    """An append some of whose messages carry idempotency keys, in the writer's
    transaction: each key is claimed first (the claim table's primary key makes it
    unique per conversation); a message whose key was claimed before, in this
    conversation or earlier in this append, is not written and answers as stored.
    Nothing is written when every key was stored."""
    conversation = require_incarnation(conn, q, session_id, incarnation)["incarnation"]
    claimed = {
        key
        for key in keys.keys_of(params)
        if conn.execute(q["claim_key"], {"incarnation": conversation, "key": key}).rowcount == 1
    }
    fresh, steps = keys.plan(params, claimed)
    written: list[StoredMessage] = []
    if fresh:
        _, ids = append_rows(conn, q, session_id, fresh, now, incarnation, turn)
        written = [stored_message_from_row(r) for r in _rows_by_id(conn, q, ids)]
    return keys.answers(steps, written, lambda key: stored_by_key(conn, q, conversation, key))


def stored_by_key(conn: sqlite3.Connection, q: Queries, incarnation: str, key: str) -> StoredMessage:
    """The stored message carrying ``key``: its live copy if a compaction carried it,
    else the original."""
    row = conn.execute(q["keyed_row"], {"incarnation": incarnation, "key": key}).fetchone()
    if row is None:
        raise keys.missing_row(key)
    return stored_message_from_row(row)


def _rows_by_id(conn: sqlite3.Connection, q: Queries, ids: Sequence[int]) -> list[Row]:
    return conn.execute(q["rows_by_id"], {"ids": json.dumps(list(ids))}).fetchall()
