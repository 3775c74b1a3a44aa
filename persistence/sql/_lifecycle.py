"""Transaction bodies of the data lifecycle, every dialect's: listing pages,
metadata, ending, erasure, archive retention and expiry.

Each takes the dialect's cursor inside the caller's transaction. Where a database
needs row locks to order a body with appends and compaction commits (PostgreSQL),
the dialect's locking hooks (`Dialect.lock_lineage`) take them; where every write
holds the one write lock (SQLite), the hooks only read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocol import SessionInfo, SessionNotFoundError

from .._metadata import Listing, merge_metadata, metadata_from_column
from ._dialect import Cursor, Dialect
from ._lineage import ended_error, require_session

__all__ = [
    "end_session",
    "erase_lineage",
    "expire_lineage",
    "idle_lineages",
    "lineage_ids",
    "list_sessions",
    "prune",
    "update_metadata",
]

Queries = Mapping[str, str]

#: The tables of a lineage's rows besides its messages, in the order they are erased
#: (sessions last: every other row names them).
_ERASED_AFTER_MESSAGES = (
    "erase_compactions",
    "erase_leases",
    "erase_cooldowns",
    "erase_keys",
    "erase_turn_keys",
    "erase_sessions",
)


def list_sessions(c: Cursor, q: Queries, args: Listing) -> list[Any]:
    """One page, newest first; ``after`` given by id must still exist."""
    after_created = after_id = None
    if isinstance(args.after, SessionInfo):
        after_created, after_id = args.after.created_at, args.after.id
    elif args.after is not None:
        row = c.execute(q["session_created_at"], {"session_id": args.after}).fetchone()
        if row is None:
            raise SessionNotFoundError(args.after)
        after_created, after_id = row["created_at"], args.after
    params = {
        "live": args.live,
        "source": args.source,
        "metadata": args.metadata,
        "after_created": after_created,
        "after_id": after_id,
        "limit": args.limit,
    }
    return list(c.execute(q["list_sessions"], params).fetchall())


def update_metadata(c: Cursor, q: Queries, session_id: str, patch: dict[str, Any]) -> Any:
    """Merge ``patch`` (None removes a key): read under the row's lock, merge, write."""
    row = c.execute(q["lock_metadata"], {"session_id": session_id}).fetchone()
    if row is None:
        raise SessionNotFoundError(session_id)
    merged = merge_metadata(metadata_from_column(row["metadata"]), patch)
    c.execute(q["set_metadata"], {"session_id": session_id, "metadata": merged})
    return require_session(c, q, session_id)


def end_session(c: Cursor, q: Queries, session_id: str, reason: str, now: float | None) -> Any:
    """End the session with ``reason`` (again with the same reason: a no-op); its row.
    The UPDATE comes first: it is the check, whatever ended the session meanwhile."""
    ended_now = c.execute(q["end_session"], {"session_id": session_id, "reason": reason, "now": now}).rowcount == 1
    row = require_session(c, q, session_id)
    if not ended_now and row["end_reason"] != reason:
        raise ended_error(c, q, session_id)
    return row


def lineage_ids(c: Cursor, q: Queries, session_id: str) -> list[str]:
    """Every session id of the lineage holding ``session_id`` (SessionNotFoundError if none)."""
    ids = [r["id"] for r in c.execute(q["lineage_ids"], {"session_id": session_id}).fetchall()]
    if not ids:
        raise SessionNotFoundError(session_id)
    return ids


def erase_lineage(c: Cursor, dialect: Dialect, session_id: str) -> int:
    """Delete every row of the lineage (messages first: they point at sessions and at
    each other); returns the number of messages erased."""
    q = dialect.queries
    ids = {"ids": dialect.id_list(dialect.lock_lineage(c, session_id))}
    erased = int(c.execute(q["erase_messages"], ids).rowcount)
    for query in _ERASED_AFTER_MESSAGES:
        c.execute(q[query], ids)
    return erased


def prune(c: Cursor, dialect: Dialect, *, older_than: float, session_id: str | None) -> int:
    """Prune archived rows that left the live transcript ``older_than`` seconds ago."""
    q = dialect.queries
    ids = None if session_id is None else dialect.id_list(lineage_ids(c, q, session_id))
    params = {"older_than": older_than, "now": dialect.clock(), "ids": ids}
    return int(c.execute(q["prune_archive"], params).rowcount)


def idle_lineages(
    c: Cursor, dialect: Dialect, *, idle_for: float, source: str | None, root: str | None = None
) -> list[tuple[str, str]]:
    """``(root, tip)`` of each lineage without activity in the last ``idle_for``
    seconds (see ``idle_lineages`` in queries.sql)."""
    params = {"idle_for": idle_for, "now": dialect.clock(), "source": source, "root": root}
    return [(r["root"], r["tip"]) for r in c.execute(dialect.queries["idle_lineages"], params).fetchall()]


def expire_lineage(c: Cursor, dialect: Dialect, root: str, *, idle_for: float) -> bool:
    """Erase the lineage of ``root`` if it is still idle once it is locked (an append
    committed since the look-up keeps it; one waiting for the lock finds it erased);
    whether it was erased."""
    try:
        dialect.lock_lineage(c, root)
    except SessionNotFoundError:  # erased meanwhile
        return False
    if not idle_lineages(c, dialect, idle_for=idle_for, source=None, root=root):
        return False
    erase_lineage(c, dialect, root)
    return True
