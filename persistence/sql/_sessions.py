"""Transaction bodies of session rows and retraction, every dialect's.

Each takes the dialect's cursor inside the caller's transaction, so a check and
the write it guards see one state. Where a database orders writes by row locks
(PostgreSQL), the dialect's locking hook (`Dialect.lock_live_tip`) takes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocol import END_REASON_COMPRESSION, InvalidLineageError, SessionExistsError

from .._rows import new_incarnation
from ._lineage import require_session
from ._turns import turn_held

if TYPE_CHECKING:
    from ._dialect import Cursor, Dialect

__all__ = ["create_session", "create_sessions", "retract_last"]


def create_session(
    cur: Cursor, dialect: Dialect, session_id: str, source: str, parent_session_id: str | None, metadata: str
) -> Any:
    """Insert session ``session_id`` (a continuation of ``parent_session_id``, which a
    compaction ended, shares its conversation); its row."""
    q = dialect.queries
    incarnation = new_incarnation()
    if parent_session_id is not None:  # the parent first
        parent = require_session(cur, q, parent_session_id)
        if parent["end_reason"] != END_REASON_COMPRESSION:
            raise InvalidLineageError(session_id, parent_session_id)
        incarnation = parent["incarnation"]  # a continuation of the same conversation
    if cur.execute(q["get_session"], {"session_id": session_id}).fetchone() is not None:
        raise SessionExistsError(session_id)
    params = {
        "session_id": session_id,
        "source": source,
        "parent_session_id": parent_session_id,
        "now": dialect.clock(),
        "metadata": metadata,
        "incarnation": incarnation,
    }
    try:
        cur.execute(q["insert_session"], params)
    except dialect.duplicate_session as exc:  # created by a transaction committed since the look
        raise SessionExistsError(session_id) from exc
    return require_session(cur, q, session_id)


def create_sessions(cur: Cursor, dialect: Dialect, session_ids: list[str], source: str, metadata: str) -> list[Any]:
    """Insert new sessions (no parents), each a conversation of its own; their rows in
    the order given. Any id taken: `SessionExistsError` (the first in that order),
    and the caller's transaction rolls back the rest."""
    rows = [(sid, source, metadata, new_incarnation()) for sid in session_ids]
    created = dialect.insert_sessions(cur, rows)
    taken = next((sid for sid in session_ids if sid not in created), None)
    if taken is not None:
        raise SessionExistsError(taken)
    return [created[sid] for sid in session_ids]


def retract_last(cur: Cursor, dialect: Dialect, session_id: str, incarnation: str | None, turn: int | None) -> Any:
    """Retract the last live message of the live tip; the row as it was, or None.
    ``incarnation``: the conversation meant (None: any). Refused (`TurnHeldError`)
    while another holder's turn lease is live on the tip (``turn``: the token of the
    lease the caller retracts under), and (`DeadTurnError`) while the tip holds a
    dead turn."""
    q, now = dialect.queries, dialect.clock()
    tip = dialect.lock_live_tip(cur, session_id, incarnation)["id"]
    held = cur.execute(q["turn_of"], {"session_id": tip, "now": now}).fetchone()
    live = bool(held["turn_live"])
    dead = held["turn_holder"] is not None and not live
    if dead or (live and held["turn_token"] != turn) or (turn is not None and not live):
        raise turn_held(cur, q, tip, turn, now)
    return cur.execute(q["retract_last"], {"session_id": tip, "now": now}).fetchone()
