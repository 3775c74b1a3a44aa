"""Lineage look-ups shared by the PostgreSQL store's transactions.

Each function takes an open cursor (inside the caller's transaction) and the
named queries, so a check and the write it guards see the same snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocol import (
    END_REASON_COMPRESSION,
    InvalidLineageError,
    LineageForkedError,
    SessionEndedError,
    SessionNotFoundError,
    TranscriptError,
)

from .._rows import other_incarnation

__all__ = ["ended_error", "require_incarnation", "require_session", "resolve_tip"]

# A lineage deeper than this is a cycle (the API cannot create one); stop rather than spin.
_MAX_LINEAGE_DEPTH = 100_000


def require_session(cur: Any, queries: Mapping[str, str], session_id: str) -> Mapping[str, Any]:
    """The session row (with its cooldown columns), or `SessionNotFoundError`."""
    cur.execute(queries["get_session"], {"id": session_id})
    row = cur.fetchone()
    if row is None:
        raise SessionNotFoundError(session_id)
    return row


def resolve_tip(cur: Any, queries: Mapping[str, str], session_id: str) -> Mapping[str, Any]:
    """The row of the live tip: follow compression-ended sessions to their only child.

    Raises: `SessionNotFoundError`; `LineageForkedError` where a parent has two or
    more children.
    """
    row = require_session(cur, queries, session_id)
    seen = {session_id}
    while row["end_reason"] == END_REASON_COMPRESSION:
        cur.execute(queries["child_ids"], {"id": row["id"]})
        children = [r["id"] for r in cur.fetchall()]
        if not children:
            return row
        if len(children) > 1:
            raise LineageForkedError(row["id"], children)
        if children[0] in seen or len(seen) > _MAX_LINEAGE_DEPTH:
            raise InvalidLineageError(children[0], row["id"], f"lineage cycle through {row['id']!r}")
        seen.add(children[0])
        row = require_session(cur, queries, children[0])
    return row


def require_incarnation(
    cur: Any, queries: Mapping[str, str], session_id: str, incarnation: str | None
) -> Mapping[str, Any]:
    """The session's row, if it is the conversation the writer means (``incarnation``
    None: any): one erased and started again under the same id is not."""
    row = require_session(cur, queries, session_id)
    if incarnation is not None and row["incarnation"] != incarnation:
        raise other_incarnation(session_id)
    return row


def ended_error(cur: Any, queries: Mapping[str, str], session_id: str) -> TranscriptError:
    """The error for a write refused because ``session_id`` is ended (or missing).

    `SessionEndedError.successor_id` is the live continuation, or None when there
    is none or the lineage forked.
    """
    row = require_session(cur, queries, session_id)
    if row["ended_at"] is None:  # created after the refused write looked for it
        return SessionNotFoundError(session_id)
    successor = None
    if row["end_reason"] == END_REASON_COMPRESSION:
        try:
            tip = resolve_tip(cur, queries, session_id)
        except (LineageForkedError, InvalidLineageError):
            tip = None
        if tip is not None and tip["id"] != session_id and tip["ended_at"] is None:
            successor = tip["id"]
    return SessionEndedError(session_id, successor, row["end_reason"])


#: A tip that keeps rotating while a write waits for its lock is a bug, not a race.
MAX_TIP_ROUNDS = 16


def lock_live_tip(
    cur: Any, queries: Mapping[str, str], session_id: str, incarnation: str | None = None
) -> Mapping[str, Any]:
    """The row of ``session_id``'s live tip, locked (``lock_session``): resolved again
    when a rotation ended it while this waited for the lock. ``incarnation``: the
    conversation meant (None: any). A tip ended for another reason than a compaction
    raises `SessionEndedError`."""
    for _ in range(MAX_TIP_ROUNDS):
        tip = resolve_tip(cur, queries, session_id)["id"]
        cur.execute(queries["lock_session"], {"id": tip})
        row = cur.fetchone()
        if row is None:
            raise SessionNotFoundError(tip)
        if incarnation is not None and row["incarnation"] != incarnation:
            raise other_incarnation(tip)
        if row["ended_at"] is not None and row["end_reason"] != END_REASON_COMPRESSION:
            raise SessionEndedError(tip, None, row["end_reason"])
        if row["ended_at"] is None or resolve_tip(cur, queries, tip)["id"] == tip:
            return row
    raise SessionEndedError(session_id, None, None, f"the lineage of {session_id!r} kept rotating")
