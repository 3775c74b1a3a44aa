"""SQLite's insert of a branch (`Dialect.insert_branch`): the session row, where it
was taken from, and the copied rows with their seqs reserved."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from .._rows import new_incarnation
from ._sessions import insert_rows, reserve_seqs

__all__ = ["insert_branch"]

Queries = Mapping[str, str]


def insert_branch(
    conn: sqlite3.Connection,
    q: Queries,
    origin: sqlite3.Row,
    new_id: str,
    metadata: str | None,
    at_seq: int,
    params: list[dict[str, Any]],
    now: float,
) -> None:
    conn.execute(
        q["insert_session"],
        {
            "session_id": new_id,
            "source": origin["source"],
            "parent_session_id": None,  # a conversation of its own, not a continuation
            "now": now,
            "metadata": origin["metadata"] if metadata is None else metadata,  # None: the origin's
            "incarnation": new_incarnation(),
        },
    )
    conn.execute(q["mark_branch"], {"session_id": new_id, "branch_of": origin["id"], "at_seq": at_seq})
    insert_rows(conn, q, new_id, params, now, reserve_seqs(conn, q, new_id, len(params)))
