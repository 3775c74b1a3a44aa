"""PostgreSQL's locking hook on a lineage: the live tip, locked against a rotation.

The look-ups it builds on are every dialect's (`persistence.sql._lineage`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocol import END_REASON_COMPRESSION, SessionEndedError, SessionNotFoundError

from .._rows import other_incarnation
from ..sql._lineage import resolve_tip

__all__ = ["lock_live_tip"]

#: A tip that keeps rotating while a write waits for its lock is a bug, not a race.
MAX_TIP_ROUNDS = 16


def lock_live_tip(
    cur: Any, queries: Mapping[str, str], session_id: str, incarnation: str | None = None, now: float | None = None
) -> Mapping[str, Any]:
    """The row of ``session_id``'s live tip, locked (``lock_session``): resolved again
    when a rotation ended it while this waited for the lock. ``incarnation``: the
    conversation meant (None: any). ``now``: the store's clock (None: the server's).
    A tip ended for another reason than a compaction raises `SessionEndedError`."""
    for _ in range(MAX_TIP_ROUNDS):
        tip = resolve_tip(cur, queries, session_id)["id"]
        cur.execute(queries["lock_session"], {"id": tip, "now": now})
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
