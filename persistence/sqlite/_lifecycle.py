"""Transaction bodies of the data lifecycle on SQLite: listing pages, metadata,
erasure, retraction and archive retention.

Like `persistence.sqlite._sessions`, each is a function of an open connection inside
the caller's transaction (the writer's for writes, so every check and the write
it guards see one state of the database).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from protocol import (
    END_REASON_COMPRESSION,
    SessionEndedError,
    SessionInfo,
    SessionNotFoundError,
)

from .._metadata import merge_metadata, metadata_from_column
from ..sql._lineage import require_incarnation, require_session, resolve_tip
from ._sessions import turn_held

__all__ = [
    "erase_lineage",
    "expire_lineage",
    "idle_lineages",
    "lineage_ids",
    "list_sessions",
    "prune",
    "retract_last",
    "update_metadata",
]

Queries = Mapping[str, str]
Row = sqlite3.Row


def list_sessions(
    conn: sqlite3.Connection,
    q: Queries,
    *,
    live: bool | None,
    source: str | None,
    metadata: str | None,
    after: SessionInfo | str | None,
    limit: int | None,
) -> list[Row]:
    """One page, newest first; ``after`` given by id must still exist."""
    after_created = after_id = None
    if isinstance(after, SessionInfo):
        after_created, after_id = after.created_at, after.id
    elif after is not None:
        row = conn.execute(q["session_created_at"], {"session_id": after}).fetchone()
        if row is None:
            raise SessionNotFoundError(after)
        after_created, after_id = row["created_at"], after
    params = {
        "live": live,
        "source": source,
        "metadata": metadata,
        "after_created": after_created,
        "after_id": after_id,
        "limit": -1 if limit is None else limit,
    }
    return conn.execute(q["list_sessions"], params).fetchall()


def update_metadata(conn: sqlite3.Connection, q: Queries, session_id: str, patch: dict[str, Any]) -> Row:
    """Merge ``patch`` (None removes a key) under the write lock: read, merge, write."""
    row = require_session(conn, q, session_id)
    merged = merge_metadata(metadata_from_column(row["metadata"]), patch)
    conn.execute(q["set_metadata"], {"session_id": session_id, "metadata": merged})
    return require_session(conn, q, session_id)


def lineage_ids(conn: sqlite3.Connection, q: Queries, session_id: str) -> list[str]:
    """Every session id of the lineage holding ``session_id`` (SessionNotFoundError if none)."""
    ids = [r["id"] for r in conn.execute(q["lineage_ids"], {"session_id": session_id})]
    if not ids:
        raise SessionNotFoundError(session_id)
    return ids


def erase_lineage(conn: sqlite3.Connection, q: Queries, session_id: str) -> int:
    """Delete every row of the lineage (messages first: they point at sessions and at
    each other); returns the number of messages erased."""
    ids = {"ids": json.dumps(lineage_ids(conn, q, session_id))}
    erased = conn.execute(q["erase_messages"], ids).rowcount
    for query in (
        "erase_compactions",
        "erase_leases",
        "erase_cooldowns",
        "erase_keys",
        "erase_turn_keys",
        "erase_sessions",
    ):
        conn.execute(q[query], ids)
    return erased


def retract_last(
    conn: sqlite3.Connection,
    q: Queries,
    session_id: str,
    now: float,
    incarnation: str | None = None,
    turn: int | None = None,
) -> Row | None:
    """Retract the last live message of the live tip; the row as it was, or None.
    Refused (`TurnHeldError`) while another holder's turn lease is live on the tip
    (``turn``: the token of the lease the caller retracts under), and
    (`DeadTurnError`) while the tip holds a dead turn."""
    tip = require_incarnation(conn, q, resolve_tip(conn, q, session_id)["id"], incarnation)
    if tip["ended_at"] is not None and tip["end_reason"] != END_REASON_COMPRESSION:
        raise SessionEndedError(tip["id"], None, tip["end_reason"])
    held = conn.execute(q["turn_of"], {"session_id": tip["id"]}).fetchone()
    live = held["turn_holder"] is not None and held["turn_expires_at"] > now
    dead = held["turn_holder"] is not None and not live
    if dead or (live and held["turn_token"] != turn) or (turn is not None and not live):
        raise turn_held(conn, q, tip["id"], turn, now)
    row = conn.execute(q["last_live"], {"session_id": tip["id"]}).fetchone()
    if row is None:
        return None
    conn.execute(q["retract_message"], {"id": row["id"], "now": now})
    return row


def prune(conn: sqlite3.Connection, q: Queries, *, cutoff: float, session_id: str | None) -> int:
    """Prune archived rows that left the live transcript at or before ``cutoff``."""
    ids = None if session_id is None else json.dumps(lineage_ids(conn, q, session_id))
    return conn.execute(q["prune_archive"], {"cutoff": cutoff, "ids": ids}).rowcount


def idle_lineages(
    conn: sqlite3.Connection, q: Queries, *, cutoff: float, now: float, source: str | None, root: str | None = None
) -> list[tuple[str, str]]:
    """``(root, tip)`` of each lineage without activity after ``cutoff`` (see
    ``idle_lineages`` in queries.sql)."""
    params = {"cutoff": cutoff, "now": now, "source": source, "root": root}
    return [(r["root"], r["tip"]) for r in conn.execute(q["idle_lineages"], params)]


def expire_lineage(conn: sqlite3.Connection, q: Queries, root: str, *, cutoff: float, now: float) -> bool:
    """Erase the lineage of ``root`` if it is still idle (checked under the write lock:
    an append since the look-up keeps it); whether it was erased."""
    if not idle_lineages(conn, q, cutoff=cutoff, now=now, source=None, root=root):
        return False
    erase_lineage(conn, q, root)
    return True
