"""PostgreSQL's retraction: the last live message of the live tip leaves the transcript.

It takes the same row lock as appends and compaction commits (`lock_live_tip`), so
it is ordered with them. The rest of the data lifecycle is every dialect's
(`persistence.sql._lifecycle`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..sql._turns import turn_held
from ._lineage import lock_live_tip

__all__ = ["retract_last"]

Queries = Mapping[str, str]


def retract_last(
    cur: Any, q: Queries, session_id: str, incarnation: str | None = None, turn: int | None = None
) -> Mapping[str, Any] | None:
    """Retract the last live message of the live tip; the row as it was, or None.
    ``incarnation``: the conversation meant (None: any). Refused (`TurnHeldError`)
    while another holder's turn lease is live on the tip (``turn``: the token of
    the lease the caller retracts under), and (`DeadTurnError`) while the tip holds
    a dead turn."""
    row = lock_live_tip(cur, q, session_id, incarnation)
    tip = row["id"]
    dead = row["turn_holder"] is not None and not row["turn_live"]
    if dead or (row["turn_live"] and row["turn_token"] != turn) or (turn is not None and not row["turn_live"]):
        raise turn_held(cur, q, tip, turn)
    cur.execute(q["retract_last"], {"id": tip})
    return cur.fetchone()
