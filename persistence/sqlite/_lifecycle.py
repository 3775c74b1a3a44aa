"""SQLite's retraction: the last live message of the live tip leaves the transcript.

A function of an open connection inside the writer's transaction, so the checks
and the write they guard see one state of the database. The rest of the data
lifecycle is every dialect's (`persistence.sql._lifecycle`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from protocol import END_REASON_COMPRESSION, SessionEndedError

from ..sql._lineage import require_incarnation, resolve_tip
from ..sql._turns import turn_held

__all__ = ["retract_last"]

Queries = Mapping[str, str]
Row = sqlite3.Row


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
    held = conn.execute(q["turn_of"], {"session_id": tip["id"], "now": now}).fetchone()
    live = bool(held["turn_live"])
    dead = held["turn_holder"] is not None and not live
    if dead or (live and held["turn_token"] != turn) or (turn is not None and not live):
        raise turn_held(conn, q, tip["id"], turn, now)
    row = conn.execute(q["last_live"], {"session_id": tip["id"]}).fetchone()
    if row is None:
        return None
    conn.execute(q["retract_message"], {"id": row["id"], "now": now})
    return row
