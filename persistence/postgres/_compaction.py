"""What PostgreSQL writes for a compaction commit (`persistence.sql._compaction` runs
the commit): the continuation's row, the summary and the copied tail set-based, and
the NOTIFY on ``session_actors_compaction`` the server sends only on COMMIT."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from protocol import CompactionRecord

__all__ = ["column_arrays", "insert_compacted", "notify_compaction"]

Queries = Mapping[str, str]


def column_arrays(params: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Column-wise arrays of message params, for the ``unnest`` inserts."""
    return {
        "roles": [p["role"] for p in params],
        "contents": [p["content"] for p in params],
        "names": [p["name"] for p in params],
        "tool_call_ids": [p["tool_call_id"] for p in params],
        "tool_calls": [p["tool_calls"] for p in params],
        "metas": [p["meta"] for p in params],
        "origins": [p.get("origin_id") for p in params],  # a verbatim summary row's original
    }


def insert_compacted(
    cur: Any,
    q: Queries,
    target: str,
    first_seq: int,
    params: Sequence[Mapping[str, Any]],
    tail: Sequence[Any],
    now: float | None,
) -> None:
    """The summary's rows with one statement (each naming its ``origin_id``, when it
    repeats an archived row verbatim), then the tail's copies with another (``now``:
    the store's clock, None: the server's)."""
    rows = {"session_id": target, "first_seq": first_seq, "now": now, **column_arrays(params)}
    cur.execute(q["insert_messages"], rows)
    if tail:
        ids = [row["id"] for row in tail]
        copies = {"target": target, "first_seq": first_seq + len(params), "ids": ids, "now": now}
        cur.execute(q["copy_tail"], copies)


def notify_compaction(cur: Any, q: Queries, record: CompactionRecord) -> None:
    params = {
        "session_id": record.session_id,
        "child_session_id": record.child_session_id,
        "mode": record.mode,
        "token": record.token,
    }
    cur.execute(q["notify_compaction"], params)
