"""Bulk appends for group commit: a run of append requests in a handful of statements.

The single writer is the shared bottleneck, and every statement it runs hands
the GIL to the waiting callers and must win it back (Python's sqlite3 lets go
of the GIL around each step), so a run of appends costs a fixed number of
statements whatever its size: multi-row INSERTs of up to `ROWS_PER_INSERT` rows
and one UPDATE of the sessions' seq counters, plus, for sessions whose counters
the writer does not remember (`RememberedCounters`), one read of them first (as
one JSON object). The ids come from the last INSERT's rowid.
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
    them can skip reading them: a hint, never trusted. The batch moves them with
    one UPDATE that changes every counter or none, and none unless each session is
    live, of the incarnation meant and still at the remembered seq (another
    process appends, a compaction, an erasure and a rolled-back batch all leave a
    remembered counter stale: then the batch reads them, as without it). Used by
    the writer's thread only."""

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
    if start is None:  # counters just read, under the write lock: set them
        conn.execute(q["set_next_seqs"], {"next_seqs": _ENCODER.encode(next_seq)})
    elif (moved := _move_remembered(conn, q, wanted, start, next_seq)) != len(wanted):
        remembered.forget(wanted)
        # 0: nothing changed, read the counters after all; anything else cannot happen
        # (all or none), but would leave counters half moved: the writer rolls back
        return bulk_append(conn, q, jobs, clock, remembered) if moved == 0 else None
    last_id = _insert_rows(conn, q, values)
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


def _move_remembered(conn: sqlite3.Connection, q: Mapping[str, str], wanted: Mapping[str, str | None],
                     start: Mapping[str, int], next_seq: Mapping[str, int]) -> int:
    """Move the counters from their remembered values ``start`` to ``next_seq``; the
    number moved: all of them, or 0 when any session is not as remembered."""
    # a counter expected at n of any incarnation is the number n; of incarnation i, the
    # text "n i" (the database compares it with next_seq || ' ' || incarnation)
    expected = {sid: n if wanted[sid] is None else f"{n} {wanted[sid]}" for sid, n in start.items()}
    return conn.execute(q["advance_remembered_next_seqs"], {
        "expected": _ENCODER.encode(expected), "moved": _ENCODER.encode(next_seq), "count": len(expected),
    }).rowcount


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
