"""Branches on PostgreSQL: the transaction body of `Store.branch` and the store
method (`BranchMethods`, mixed into `PostgresStore`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from protocol import SessionExistsError, SessionInfo

from .._branch import check_branch, copied_rows
from .._rows import new_incarnation, session_from_row, stored_message_from_row
from ..sql._lineage import require_session
from ._compaction import column_arrays

__all__ = ["BranchMethods", "branch"]

Queries = Mapping[str, str]


def branch(cur: Any, q: Queries, session_id: str, at_seq: int, new_id: str, metadata: str | None) -> Mapping[str, Any]:
    """Start ``new_id`` with the live rows of ``session_id`` up to ``at_seq``."""
    require_session(cur, q, session_id)
    cur.execute(q["live_messages"], {"session_id": session_id})
    rows = cur.fetchall()
    params = copied_rows(session_id, at_seq, [stored_message_from_row(r) for r in rows], rows)
    cur.execute(q["get_session"], {"session_id": new_id})
    if cur.fetchone() is not None:
        raise SessionExistsError(new_id)
    cur.execute(
        q["insert_branch"],
        {
            "id": new_id,
            "metadata": metadata,
            "incarnation": new_incarnation(),
            "branch_of": session_id,
            "at_seq": at_seq,
            "next_seq": len(params) + 1,
        },
    )
    cur.execute(q["insert_messages"], {"session_id": new_id, "first_seq": 1, **column_arrays(params)})
    return require_session(cur, q, new_id)


class BranchMethods:
    """`Store.branch` on PostgreSQL."""

    if TYPE_CHECKING:
        _q: Queries

        def _write(self, what: str, work: Any) -> Any: ...

    def branch(
        self, session_id: str, at_seq: int, new_id: str, *, metadata: Mapping[str, Any] | None = None
    ) -> SessionInfo:
        sid, seq, new, text = check_branch(session_id, at_seq, new_id, metadata)
        row = self._write("branch", lambda cur: branch(cur, self._q, sid, seq, new, text))
        return session_from_row(row)
