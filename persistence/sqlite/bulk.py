"""Bulk appends for group commit: a run of append requests in a handful of statements.

The single writer is the shared bottleneck, and every statement it runs hands
the GIL to the waiting callers and must win it back (Python's sqlite3 lets go
of the GIL around each step), so a run of appends costs a fixed number of
statements whatever its size: one read of the live sessions' seq counters (as
one JSON object), multi-row INSERTs of up to `ROWS_PER_INSERT` rows, and one
UPDATE of the counters. The ids come from the last INSERT's rowid.
"""

from __future__ import annotations

import functools
import json
import operator
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = ["ROWS_PER_INSERT", "AppendJob", "bulk_append"]

#: Rows per multi-row INSERT: full statements of this size, then one for the rest,
#: so at most this many distinct statements live in the connection's cache.
ROWS_PER_INSERT = 64
_COLUMNS = operator.itemgetter("role", "content", "name", "tool_call_id", "tool_calls", "meta")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class AppendJob(NamedTuple):
    """One append request: checked column values for ``session_id``'s next seqs
    (a tuple: one is built per append, on the caller's thread)."""

    session_id: str
    params: Sequence[Mapping[str, Any]]
    incarnation: str | None = None  # the conversation meant (None: any)


def bulk_append(
    conn: sqlite3.Connection, q: Mapping[str, str], jobs: list[AppendJob], clock: Callable[[], float]
) -> list[tuple[int, list[int], float]] | None:
    """Append every job; per job ``(first_seq, ids, created_at)`` like the single path.

    None, having written nothing, when a session is unknown, ended or another
    incarnation than a job means: the writer then replays the batch request by
    request, so only those requests fail.
    """
    wanted: dict[str, str | None] = {}
    for job in jobs:
        if wanted.setdefault(job.session_id, job.incarnation) != job.incarnation:
            return None  # two incarnations meant for one id: let each request answer alone
    found = conn.execute(q["live_next_seqs"], {"ids": _ENCODER.encode(wanted)}).fetchone()[0]
    next_seq: dict[str, int] = json.loads(found)
    if len(next_seq) != len(wanted):
        return None
    now = clock()  # read under the write lock, like every write's clock
    firsts, values = [], []
    for job in jobs:
        sid = job.session_id
        first = seq = next_seq[sid]
        for p in job.params:
            values.append((sid, seq, *_COLUMNS(p), now))
            seq += 1
        next_seq[sid] = seq
        firsts.append(first)
    last_id = _insert_rows(conn, q, values)
    conn.execute(q["set_next_seqs"], {"next_seqs": _ENCODER.encode(next_seq)})
    # AUTOINCREMENT under the exclusive write lock, with no trigger inserting into
    # messages, hands out consecutive ids: the run's rows are last_id-n+1 .. last_id.
    next_id = last_id - len(values) + 1
    results = []
    for job, first in zip(jobs, firsts):
        count = len(job.params)
        results.append((first, list(range(next_id, next_id + count)), now))
        next_id += count
    return results


def _insert_rows(conn: sqlite3.Connection, q: Mapping[str, str], values: list[tuple[Any, ...]]) -> int:
    """Insert the rows in order, `ROWS_PER_INSERT` per statement; the last row's id (0 if none)."""
    last_id = 0
    for start in range(0, len(values), ROWS_PER_INSERT):
        chunk = values[start:start + ROWS_PER_INSERT]
        sql = _insert_sql(q["insert_messages_head"], q["insert_messages_row"], len(chunk))
        last_id = conn.execute(sql, [v for row in chunk for v in row]).lastrowid
    return last_id


@functools.lru_cache(maxsize=ROWS_PER_INSERT)
def _insert_sql(head: str, row: str, rows: int) -> str:
    """The INSERT of ``rows`` rows (the same text each time: the statement cache hits)."""
    return head + "\n" + ",\n".join([row] * rows)
