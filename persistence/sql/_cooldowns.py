"""Cooldowns: the transaction bodies of the cooldown operations, every dialect's.

A session row carries its cooldown (``cooldown_until``, ``cooldown_error``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol import Cooldown

from .._rows import cooldown_from_row
from ._lineage import existing, first_row, require_incarnation, require_session

if TYPE_CHECKING:
    from ._dialect import Cursor, Dialect

__all__ = ["arm_cooldown", "cooldown", "restore_cooldown"]


def cooldown(cur: Cursor, dialect: Dialect, session_id: str) -> Cooldown | None:
    """The cooldown armed on ``session_id``, if any."""
    row = require_session(cur, dialect.queries, session_id)  # the session row carries its cooldown
    if row["cooldown_until"] is None:
        return None
    return Cooldown(session_id, float(row["cooldown_until"]), row["cooldown_error"])


def arm_cooldown(
    cur: Cursor, dialect: Dialect, session_id: str, seconds: float, error: str | None, incarnation: str | None
) -> Cooldown:
    """Arm a cooldown of ``seconds`` on the conversation meant, not one re-created under its id."""
    q = dialect.queries
    require_incarnation(cur, q, session_id, incarnation, lock=dialect)
    with existing(dialect, session_id):
        params = {"session_id": session_id, "seconds": seconds, "error": error, "now": dialect.clock()}
        return cooldown_from_row(first_row(cur, q, "arm_cooldown", **params))


def restore_cooldown(cur: Cursor, dialect: Dialect, session_id: str, snapshot: Cooldown | None) -> None:
    """Put back cooldown ``snapshot`` (None: none armed)."""
    q = dialect.queries
    require_session(cur, q, session_id)
    if snapshot is None:
        cur.execute(q["delete_cooldown"], {"session_id": session_id})
        return
    params = {"session_id": session_id, "until": float(snapshot.until), "error": snapshot.error}
    with existing(dialect, session_id):  # an erasure committed since require_session: never recreate its row
        cur.execute(q["put_cooldown"], params)
