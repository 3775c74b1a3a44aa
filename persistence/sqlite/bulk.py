"""Bulk appends for group commit: a run of append requests in a handful of statements.

The single writer is the shared bottleneck, and every statement it runs hands
the GIL to the waiting callers and must win it back (Python's sqlite3 lets go
of the GIL five times a statement), so a run of appends costs a fixed number of
statements whatever its size: multi-row INSERTs of up to `ROWS_PER_INSERT` rows,
whose rows move their sessions' seq counters themselves (the trigger
``messages_next_seq``, schema version 5). For sessions whose counters the writer
remembers (`RememberedCounters`) the first INSERT checks them in the database and
the run is that one statement; otherwise one read of them comes first (as one
JSON object). The ids come from the last INSERT's rowid.
"""

from __future__ import annotations

import functools
import json
import operator
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = ["MAX_REMEMBERED", "ROWS_PER_INSERT", "AppendJob", "RememberedCounters", "bulk_append"]

#: Rows per multi-row INSERT: full statements of this size, then one for the rest,
#: so at most this many distinct statements live in the connection's cache.
ROWS_PER_INSERT = 64
#: Sessions whose counters a writer remembers; past it the oldest noted is forgotten.
MAX_REMEMBERED = 4096
_COLUMNS = operator.itemgetter("role", "content", "name", "tool_call_id", "tool_calls", "meta")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class AppendJob(NamedTuple):
    """One append request: checked column values for ``session_id``'s next seqs
    (a tuple: one is built per append, on the caller's thread)."""

    session_id: str
    params: Sequence[Mapping[str, Any]]
    incarnation: str | None = None  # the conversation meant (None: any)


class RememberedCounters:
    """The seq counters a writer moved its sessions to, so that its next batch for
    them can skip reading them: a hint, never trusted. The batch's first INSERT
    writes nothing unless each session is live, of the incarnation meant and still
    at the remembered seq (another process appends, a compaction, an erasure and a
    rolled-back batch all leave a remembered counter stale: then the batch reads
    them, as without it). Used by the writer's thread only."""

    __slots__ = ("_next_seq",)

    def __init__(self) -> None:
        self._next_seq: dict[str, int] = {}

    def recall(self, ids: Mapping[str, object]) -> dict[str, int] | None:
        """Every one of ``ids``' remembered counters, or None when one is unknown."""
        remembered = self._next_seq
        try:
            return {sid: remembered[sid] for sid in ids}
        except KeyError:
            return None

    def note(self, next_seq: Mapping[str, int]) -> None:
        remembered = self._next_seq
        remembered.update(next_seq)
        while len(remembered) > MAX_REMEMBERED:
            del remembered[next(iter(remembered))]  # the oldest noted

    def forget(self, ids: Mapping[str, object]) -> None:
        for sid in ids:
            self._next_seq.pop(sid, None)


def bulk_append(
    conn: sqlite3.Connection, q: Mapping[str, str], jobs: list[AppendJob], clock: Callable[[], float],
    remembered: RememberedCounters,
) -> list[tuple[int, list[int], float]] | None:
    """Append every job; per job ``(first_seq, ids, created_at)`` like the single path.

    None when a session is unknown, ended or another incarnation than a job means:
    the writer then rolls the transaction back and replays the batch request by
    request, so only those requests fail.
    """
    wanted: dict[str, str | None] = {}
    for job in jobs:
        if wanted.setdefault(job.session_id, job.incarnation) != job.incarnation:
            return None  # two incarnations meant for one id: let each request answer alone
    start = remembered.recall(wanted)
    if start is not None:
        next_seq = dict(start)
    else:
        found = conn.execute(q["live_next_seqs"], {"ids": _ENCODER.encode(wanted)}).fetchone()[0]
        next_seq = json.loads(found)
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
    if start is None:
        last_id = _insert_rows(conn, q, values)
    else:
        last_id = _checked_insert(conn, q, values, _expected(wanted, start))
        if last_id is None:  # a remembered counter was stale: nothing was written
            remembered.forget(wanted)
            return bulk_append(conn, q, jobs, clock, remembered)  # reads them
        if last_id < 0:
            return None  # cannot happen (all or none), but rows went in: the writer rolls back
    remembered.note(next_seq)  # if this transaction rolls back, the next batch finds them stale
    # AUTOINCREMENT under the exclusive write lock, with no trigger inserting into
    # messages, hands out consecutive ids: the run's rows are last_id-n+1 .. last_id.
    next_id = last_id - len(values) + 1
    results = []
    for job, first in zip(jobs, firsts):
        count = len(job.params)
        results.append((first, list(range(next_id, next_id + count)), now))
        next_id += count
    return results


def _expected(wanted: Mapping[str, str | None], start: Mapping[str, int]) -> list[Any]:
    """The check of remembered counters, as the checked INSERT's first two parameters:
    the number of sessions and, as one JSON object, each one's remembered counter."""
    # a counter expected at n of any incarnation is the number n; of incarnation i, the
    # text "n i" (the database compares it with next_seq || ' ' || incarnation)
    expected = {sid: n if wanted[sid] is None else f"{n} {wanted[sid]}" for sid, n in start.items()}
    return [len(expected), _ENCODER.encode(expected)]


def _checked_insert(conn: sqlite3.Connection, q: Mapping[str, str], values: list[tuple[Any, ...]],
                    expected: list[Any]) -> int | None:
    """`_insert_rows` whose first statement checks the remembered counters ``expected``:
    None when it inserted nothing (a counter was stale), -1 when it inserted only
    some of its rows (the check is all or none: cannot happen)."""
    chunk = values[:ROWS_PER_INSERT]
    sql = _insert_sql(q["insert_checked_messages_head"], q["insert_messages_row"], len(chunk),
                      q["insert_checked_messages_tail"])
    cursor = conn.execute(sql, [*expected, *(v for row in chunk for v in row)])
    if cursor.rowcount != len(chunk):
        return None if cursor.rowcount == 0 else -1
    return _insert_rows(conn, q, values[ROWS_PER_INSERT:]) or cursor.lastrowid


def _insert_rows(conn: sqlite3.Connection, q: Mapping[str, str], values: list[tuple[Any, ...]]) -> int:
    """Insert the rows in order, `ROWS_PER_INSERT` per statement; the last row's id (0 if none)."""
    last_id = 0
    for start in range(0, len(values), ROWS_PER_INSERT):
        chunk = values[start:start + ROWS_PER_INSERT]
        sql = _insert_sql(q["insert_messages_head"], q["insert_messages_row"], len(chunk))
        last_id = conn.execute(sql, [v for row in chunk for v in row]).lastrowid
    return last_id


@functools.lru_cache(maxsize=2 * ROWS_PER_INSERT)
def _insert_sql(head: str, row: str, rows: int, tail: str = "") -> str:
    """The INSERT of ``rows`` rows (the same text each time: the statement cache hits)."""
    return head + "\n" + ",\n".join([row] * rows) + tail
