"""PostgreSQL's insert of a branch (`Dialect.insert_branch`): the session row with
its origin in one statement, then the copied rows set-based."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._rows import new_incarnation
from ._compaction import column_arrays

__all__ = ["insert_branch"]

Queries = Mapping[str, str]


def insert_branch(
    cur: Any,
    q: Queries,
    origin: Mapping[str, Any],
    new_id: str,
    metadata: str | None,
    at_seq: int,
    params: list[dict[str, Any]],
    now: float | None,
) -> None:
    cur.execute(
        q["insert_branch"],
        {
            "id": new_id,
            "metadata": metadata,
            "incarnation": new_incarnation(),
            "branch_of": origin["id"],
            "at_seq": at_seq,
            "next_seq": len(params) + 1,
            "now": now,
        },
    )
    rows = {"session_id": new_id, "first_seq": 1, "now": now, **column_arrays(params)}
    cur.execute(q["insert_messages"], rows)
