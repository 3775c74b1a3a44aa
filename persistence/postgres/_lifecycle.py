"""Transaction bodies of the data lifecycle on PostgreSQL: listing pages, metadata,
erasure, retraction and archive retention.

Each takes an open cursor inside the caller's transaction. Erasure and
retraction take the same row locks as appends and compaction commits (lease
rows before session rows, as a commit does), so they are ordered with them: a
commit that comes after an erasure finds no session and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocol import (
    SessionEndedError,
    SessionInfo,
    SessionNotFoundError,
)

from .._metadata import Listing, merge_metadata, metadata_from_column
from ..sql._lineage import require_session
from ._lineage import lock_live_tip
from ._turns import turn_held

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

# A lineage that keeps growing while we lock it is being rotated in a loop; give up
# rather than spin (the caller's retry starts over).
_MAX_LOCK_ROUNDS = 16


def list_sessions(cur: Any, q: Queries, args: Listing) -> list[Mapping[str, Any]]:
    """One page, newest first; ``after`` given by id must still exist."""
    after_created = after_id = None
    if isinstance(args.after, SessionInfo):
        after_created, after_id = args.after.created_at, args.after.id
    elif args.after is not None:
        cur.execute(q["session_created_at"], {"id": args.after})
        row = cur.fetchone()
        if row is None:
            raise SessionNotFoundError(args.after)
        after_created, after_id = row["created_at"], args.after
    cur.execute(
        q["list_sessions"],
        {
            "live": args.live,
            "source": args.source,
            "metadata": args.metadata,
            "after_created": after_created,
            "after_id": after_id,
            "limit": args.limit,
        },
    )
    return cur.fetchall()


def update_metadata(cur: Any, q: Queries, session_id: str, patch: dict[str, Any]) -> Mapping[str, Any]:
    """Merge ``patch`` (None removes a key) under the session's row lock."""
    cur.execute(q["lock_metadata"], {"id": session_id})
    row = cur.fetchone()
    if row is None:
        raise SessionNotFoundError(session_id)
    merged = merge_metadata(metadata_from_column(row["metadata"]), patch)
    cur.execute(q["set_metadata"], {"id": session_id, "metadata": merged})
    return require_session(cur, q, session_id)


def lineage_ids(cur: Any, q: Queries, session_id: str) -> list[str]:
    """Every session id of the lineage holding ``session_id`` (SessionNotFoundError if none)."""
    cur.execute(q["lineage_ids"], {"id": session_id})
    ids = [r["id"] for r in cur.fetchall()]
    if not ids:
        raise SessionNotFoundError(session_id)
    return ids


def _lock_lineage(cur: Any, q: Queries, session_id: str) -> list[str]:
    """Lock the lineage's lease and session rows until it stops growing (a rotation
    committing meanwhile adds a child); returns its ids."""
    ids = lineage_ids(cur, q, session_id)
    for _ in range(_MAX_LOCK_ROUNDS):
        cur.execute(q["lock_lineage_leases"], {"ids": ids})
        cur.execute(q["lock_lineage_sessions"], {"ids": ids})
        again = lineage_ids(cur, q, session_id)
        if set(again) <= set(ids):
            return again
        ids = sorted(set(ids) | set(again))
    raise SessionEndedError(session_id, None, None, f"the lineage of {session_id!r} kept growing")


def erase_lineage(cur: Any, q: Queries, session_id: str) -> int:
    """Delete every row of the lineage; returns the number of messages erased."""
    ids = {"ids": _lock_lineage(cur, q, session_id)}
    cur.execute(q["erase_messages"], ids)
    erased = cur.rowcount
    for query in (
        "erase_compactions",
        "erase_leases",
        "erase_cooldowns",
        "erase_keys",
        "erase_turn_keys",
        "erase_sessions",
    ):
        cur.execute(q[query], ids)
    return erased


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


def prune(cur: Any, q: Queries, *, older_than: float, session_id: str | None) -> int:
    """Prune archived rows that left the live transcript ``older_than`` seconds ago."""
    ids = None if session_id is None else lineage_ids(cur, q, session_id)
    cur.execute(q["prune_archive"], {"older_than": older_than, "ids": ids})
    return cur.rowcount


def idle_lineages(
    cur: Any, q: Queries, *, idle_for: float, source: str | None, root: str | None = None
) -> list[tuple[str, str]]:
    """``(root, tip)`` of each lineage without activity in the last ``idle_for``
    seconds (see ``idle_lineages`` in queries.sql)."""
    cur.execute(q["idle_lineages"], {"idle_for": idle_for, "source": source, "root": root})
    return [(r["root"], r["tip"]) for r in cur.fetchall()]


def expire_lineage(cur: Any, q: Queries, root: str, *, idle_for: float) -> bool:
    """Erase the lineage of ``root`` if it is still idle once its rows are locked (an
    append committed since the look-up keeps it; one waiting for the lock finds it
    erased); whether it was erased."""
    try:
        _lock_lineage(cur, q, root)
    except SessionNotFoundError:  # erased meanwhile
        return False
    if not idle_lineages(cur, q, idle_for=idle_for, source=None, root=root):
        return False
    erase_lineage(cur, q, root)
    return True
