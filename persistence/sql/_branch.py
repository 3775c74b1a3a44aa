"""`Store.branch`'s transaction body, every dialect's: a new conversation that starts
with a copy of a session's live rows up to a seq (the rows' insert is the dialect's
`Dialect.insert_branch`)."""

from __future__ import annotations

from typing import Any

from protocol import SessionExistsError

from .._branch import copied_rows
from .._rows import stored_message_from_row
from ._dialect import Cursor, Dialect
from ._lineage import require_session

__all__ = ["branch", "children"]


def branch(c: Cursor, dialect: Dialect, session_id: str, at_seq: int, new_id: str, metadata: str | None) -> Any:
    """Start ``new_id`` with the live rows of ``session_id`` up to ``at_seq``; its row."""
    q = dialect.queries
    origin = require_session(c, q, session_id)
    rows = c.execute(q["live_messages"], {"session_id": session_id}).fetchall()
    params = copied_rows(session_id, at_seq, [stored_message_from_row(r) for r in rows], rows)
    if c.execute(q["get_session"], {"session_id": new_id}).fetchone() is not None:
        raise SessionExistsError(new_id)
    dialect.insert_branch(c, origin, new_id, metadata, at_seq, params)
    return require_session(c, q, new_id)


def children(c: Cursor, dialect: Dialect, session_id: str) -> list[Any]:
    """The rows of the sessions that continue or branch from ``session_id``."""
    require_session(c, dialect.queries, session_id)
    return list(c.execute(dialect.queries["children"], {"session_id": session_id}).fetchall())
