"""Idempotent appends on PostgreSQL: an append whose messages carry keys.

It runs as one transaction of its own (not in a group-commit batch). What it writes
and answers is `persistence._keys`'s; here, the claims: in key order (two appends
claiming the same keys cannot deadlock), and a claim of a key another open
transaction holds waits for it, then finds it taken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from protocol import StoredMessage

from .. import _keys as keys
from .._rows import stored_message_from_row
from ..sql._lineage import require_incarnation

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
    fresh, steps = keys.plan(params, _claim(cur, q, conversation, keys.keys_of(params)))
    written: list[StoredMessage] = []
    if fresh:
        ids = append_rows(cur, fresh)
        cur.execute(q["rows_by_id"], {"ids": ids})
        written = [stored_message_from_row(r) for r in cur.fetchall()]
    return keys.answers(steps, written, lambda key: _stored(cur, q, conversation, key))


def _claim(cur: Any, q: Queries, conversation: str, wanted: list[str]) -> set[str]:
    claimed = set()
    for key in wanted:  # in key order: see `persistence._keys.keys_of`
        cur.execute(q["claim_key"], {"incarnation": conversation, "key": key})
        if cur.fetchone() is not None:
            claimed.add(key)
    return claimed


def _stored(cur: Any, q: Queries, conversation: str, key: str) -> StoredMessage:
    cur.execute(q["keyed_row"], {"incarnation": conversation, "key": key})
    row = cur.fetchone()
    if row is None:
        raise keys.missing_row(key)
    return stored_message_from_row(row)
