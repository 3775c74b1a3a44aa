"""Branches on SQLite: the transaction body of `Store.branch` and the store method
(`BranchMethods`, mixed into `SqliteStore`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from protocol import SessionExistsError, SessionInfo

from .._branch import check_branch, copied_rows
from .._rows import new_incarnation, session_from_row, stored_message_from_row
from ..sql._lineage import require_session
from ._sessions import insert_rows, reserve_seqs

__all__ = ["BranchMethods", "branch"]

Queries = Mapping[str, str]
T = TypeVar("T")


def branch(
    conn: sqlite3.Connection, q: Queries, session_id: str, at_seq: int, new_id: str, metadata: str | None, now: float
) -> sqlite3.Row:
    """Start ``new_id`` with the live rows of ``session_id`` up to ``at_seq``."""
    origin = require_session(conn, q, session_id)
    rows = conn.execute(q["live_messages"], {"session_id": session_id}).fetchall()
    params = copied_rows(session_id, at_seq, [stored_message_from_row(r) for r in rows], rows)
    if conn.execute(q["get_session"], {"session_id": new_id}).fetchone() is not None:
        raise SessionExistsError(new_id)
    conn.execute(
        q["insert_session"],
        {
            "session_id": new_id,
            "source": origin["source"],
            "parent_session_id": None,  # a conversation of its own, not a continuation
            "now": now,
            "metadata": origin["metadata"] if metadata is None else metadata,
            "incarnation": new_incarnation(),
        },
    )
    conn.execute(q["mark_branch"], {"session_id": new_id, "branch_of": session_id, "at_seq": at_seq})
    insert_rows(conn, q, new_id, params, now, reserve_seqs(conn, q, new_id, len(params)))
    return require_session(conn, q, new_id)


class BranchMethods:
    """`Store.branch` on SQLite."""

    if TYPE_CHECKING:
        _q: Queries

        def now(self) -> float: ...
        def _write(self, fn: Callable[[sqlite3.Connection], T], session_id: str = "?", what: str = "write") -> T: ...

    def branch(
        self, session_id: str, at_seq: int, new_id: str, *, metadata: Mapping[str, Any] | None = None
    ) -> SessionInfo:
        sid, seq, new, text = check_branch(session_id, at_seq, new_id, metadata)
        row = self._write(lambda c: branch(c, self._q, sid, seq, new, text, self.now()), new, "branch")
        return session_from_row(row)
