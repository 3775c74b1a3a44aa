"""Idempotent appends on PostgreSQL: an append whose messages carry keys.

It runs as one transaction of its own (not in a group-commit batch): each key is
claimed first, in key order (two appends claiming the same keys cannot deadlock),
in the claim table whose primary key makes a key unique per conversation. A claim
of a key another open transaction holds waits for it, then finds it taken. A
message whose key was taken is not written and answers as the stored row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from protocol import StoredMessage, TranscriptError

from .._rows import stored_message_from_row
from ._lineage import require_incarnation

__all__ = ["keyed_append"]

Queries = Mapping[str, str]


def keyed_append(
    cur: Any,
    q: Queries,
    session_id: str,
    params: Sequence[Mapping[str, Any]],
    incarnation: str | None,
    turn: int | None,
    append_rows: Any,
) -> list[StoredMessage]:
    """``append_rows(cur, fresh)`` appends the messages to write (the batch statement,
    its checks included) and returns their ids, or raises why it was refused."""
    conversation = require_incarnation(cur, q, session_id, incarnation)["incarnation"]
    claimed = _claim(cur, q, conversation, {p["key"] for p in params if p["key"] is not None})
    fresh: list[Mapping[str, Any]] = []
    first_of: dict[str, int] = {}
    plan: list[tuple[str, Any]] = []
    for p in params:
        key = p["key"]
        if key is not None and key in first_of:
            plan.append(("new", first_of[key]))
        elif key is None or key in claimed:
            if key is not None:
                first_of[key] = len(fresh)
            plan.append(("new", len(fresh)))
            fresh.append(p)
        else:
            plan.append(("stored", key))
    written: list[StoredMessage] = []
    if fresh:
        ids = append_rows(cur, fresh)
        cur.execute(q["rows_by_id"], {"ids": ids})
        written = [stored_message_from_row(r) for r in cur.fetchall()]
    return [written[i] if kind == "new" else _stored(cur, q, conversation, i) for kind, i in plan]


def _claim(cur: Any, q: Queries, conversation: str, keys: set[str]) -> set[str]:
    claimed = set()
    for key in sorted(keys):
        cur.execute(q["claim_key"], {"incarnation": conversation, "key": key})
        if cur.fetchone() is not None:
            claimed.add(key)
    return claimed


def _stored(cur: Any, q: Queries, conversation: str, key: str) -> StoredMessage:
    cur.execute(q["keyed_row"], {"incarnation": conversation, "key": key})
    row = cur.fetchone()
    if row is None:  # claimed, yet no row: only a hand-edited database
        raise TranscriptError(f"idempotency key {key!r} is claimed but no message carries it")
    return stored_message_from_row(row)


def rows_json(session_id: str, params: Sequence[Mapping[str, Any]], turn: int | None) -> str:
    """The batch statement's ``rows`` for one append."""
    rows = [
        (session_id, p["role"], p["content"], p["name"], p["tool_call_id"], p["tool_calls"], p["meta"], turn, p["key"])
        for p in params
    ]
    return json.dumps(rows, ensure_ascii=True, separators=(",", ":"))
