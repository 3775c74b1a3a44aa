"""What SQLite writes for a compaction commit (`persistence.sql._compaction` runs
the commit): the continuation's row, and the summary with the copied tail, each
row checksummed as it is inserted."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from ._sessions import insert_rows

__all__ = ["insert_child", "insert_compacted"]

Queries = Mapping[str, str]

# a copy keeps its original's idempotency key and the turn it was appended in
_COPIED = ("role", "content", "name", "tool_call_id", "tool_calls", "meta", "key", "turn")


def insert_child(conn: sqlite3.Connection, q: Queries, parent: sqlite3.Row, child_id: str, now: float) -> None:
    """The continuation's row with its parent's source, metadata and incarnation, then
    the parent's turn lease."""
    conn.execute(
        q["insert_session"],
        {
            "session_id": child_id,
            "source": parent["source"],
            "parent_session_id": parent["id"],
            "now": now,
            "metadata": parent["metadata"],
            "incarnation": parent["incarnation"],
        },
    )
    conn.execute(q["carry_turn"], {"parent_id": parent["id"], "child_id": child_id})


def insert_compacted(
    conn: sqlite3.Connection,
    q: Queries,
    target: str,
    first_seq: int,
    params: Sequence[Mapping[str, Any]],
    tail: Sequence[sqlite3.Row],
    now: float,
) -> None:
    """The summary's rows (naming the row each repeats verbatim, ``origin_id``), then
    copies of the tail's (each naming its original), from ``first_seq`` (reserved)."""
    rows = [*params, *({k: r[k] for k in _COPIED} for r in tail)]
    origins = [p.get("origin_id") for p in params] + [r["id"] for r in tail]
    insert_rows(conn, q, target, rows, now, first_seq, origins)
