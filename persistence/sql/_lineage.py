"""Lineage look-ups inside a transaction, the same for every dialect.

Each function takes the dialect's cursor (a ``sqlite3.Connection`` or a psycopg
cursor: both answer ``execute(sql, params)`` with something to fetch from) inside
the caller's transaction, so a check and the write it guards see one state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from protocol import (
    END_REASON_COMPRESSION,
    InvalidLineageError,
    LineageForkedError,
    SessionEndedError,
    SessionNotFoundError,
    TranscriptError,
)

from .._rows import other_incarnation

if TYPE_CHECKING:
    from ._dialect import Dialect

__all__ = ["ended_error", "existing", "first_row", "require_incarnation", "require_session", "resolve_tip"]

Queries = Mapping[str, str]

# A lineage deeper than this is a cycle (the API cannot create one); stop rather than spin.
_MAX_LINEAGE_DEPTH = 100_000


def require_session(cur: Any, q: Queries, session_id: str) -> Any:
    """The session row (with its cooldown columns), or `SessionNotFoundError`."""
    row = cur.execute(q["get_session"], {"session_id": session_id}).fetchone()
    if row is None:
        raise SessionNotFoundError(session_id)
    return row


def require_incarnation(
    cur: Any, q: Queries, session_id: str, incarnation: str | None, *, lock: Dialect | None = None
) -> Any:
    """The session's row, if it is the conversation the writer means (``incarnation``
    None: any): one erased and started again under the same id is not. ``lock``: the
    dialect whose locking hook (`Dialect.lock_session`) takes the row first, held
    until the transaction ends, so the write that follows the check is the
    conversation's."""
    row = require_session(cur, q, session_id) if lock is None else lock.lock_session(cur, session_id)
    if incarnation is not None and row["incarnation"] != incarnation:
        raise other_incarnation(session_id)
    return row


def resolve_tip(cur: Any, q: Queries, session_id: str) -> Any:
    """The row of the live tip: follow compression-ended sessions to their only child.

    Raises: `SessionNotFoundError`; `LineageForkedError` where a parent has two or
    more children; `InvalidLineageError` for a cycle (only a hand-edited database has one).
    """
    row = require_session(cur, q, session_id)
    seen = {session_id}
    while row["end_reason"] == END_REASON_COMPRESSION:
        children = [r["id"] for r in cur.execute(q["child_ids"], {"session_id": row["id"]}).fetchall()]
        if not children:
            return row
        if len(children) > 1:
            raise LineageForkedError(row["id"], children)
        if children[0] in seen or len(seen) > _MAX_LINEAGE_DEPTH:
            raise InvalidLineageError(children[0], row["id"], f"lineage cycle through {row['id']!r}")
        seen.add(children[0])
        row = require_session(cur, q, children[0])
    return row


def ended_error(cur: Any, q: Queries, session_id: str) -> TranscriptError:
    """The error for a write refused because ``session_id`` is ended (or missing).

    `SessionEndedError.successor_id` is the live continuation, or None when there
    is none or the lineage forked.
    """
    row = require_session(cur, q, session_id)
    if row["ended_at"] is None:  # created after the refused write looked for it
        return SessionNotFoundError(session_id)
    successor = None
    if row["end_reason"] == END_REASON_COMPRESSION:
        try:
            tip = resolve_tip(cur, q, session_id)
        except (LineageForkedError, InvalidLineageError):
            tip = None
        if tip is not None and tip["id"] != session_id and tip["ended_at"] is None:
            successor = tip["id"]
    return SessionEndedError(session_id, successor, row["end_reason"])


def first_row(cur: Any, q: Queries, query: str, **params: Any) -> Any:
    """The first row of named query ``query`` (None: no row)."""
    return cur.execute(q[query], params).fetchone()


@contextlib.contextmanager
def existing(dialect: Dialect, session_id: str) -> Iterator[None]:
    """A write that names a session erased meanwhile raises `SessionNotFoundError`
    (the dialect's `Dialect.missing_session`)."""
    try:
        yield
    except dialect.missing_session as exc:
        raise SessionNotFoundError(session_id) from exc
