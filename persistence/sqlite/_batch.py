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
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from protocol import TranscriptError

from ..sql._messages import AppendJob
from ._checksums import row_checksum

__all__ = [
    "MAX_REMEMBERED",
    "ROWS_PER_INSERT",
    "ROW_WIDTH",
    "AloneAppends",
    "AppendJob",
    "RememberedBatch",
    "RememberedCounters",
    "bulk_append",
]

#: Rows per multi-row INSERT: full statements of this size, then one for the rest,
#: so at most this many distinct statements live in the connection's cache.
ROWS_PER_INSERT = 64
#: Sessions whose counters a writer remembers; past it the oldest noted is forgotten.
MAX_REMEMBERED = 4096
_COLUMNS = operator.itemgetter("role", "content", "name", "tool_call_id", "tool_calls", "meta")
#: Parameters of a row (insert_messages_row): session_id, seq, the _COLUMNS, created_at, turn, usage,
#: checksum.
ROW_WIDTH = 12
_CHUNK = ROWS_PER_INSERT * ROW_WIDTH  # parameters of a full INSERT
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


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
    conn: sqlite3.Connection,
    q: Mapping[str, str],
    jobs: list[AppendJob],
    clock: Callable[[], float],
    remembered: RememberedCounters,
) -> list[tuple[int, list[int], float]] | None:
    """Append every job in the writer's transaction; per job ``(first_seq, ids,
    created_at)`` like the single path.

    None when a session is unknown, ended, another incarnation than a job means or
    under another holder's live turn lease: the writer then rolls the transaction
    back and replays the batch request by request, so only those requests fail.
    """
    meant = _wanted(jobs)
    if meant is None:
        return None  # two incarnations or turns meant for one id: let each request answer alone
    wanted, turns = meant
    start = remembered.recall(wanted)
    if start is not None:
        try:  # the clock read under the write lock, like every write's clock
            results = _remembered_append(conn, q, RememberedBatch(jobs, wanted, start, turns), clock(), remembered)
        except _PartlyWritten:
            return None  # the writer rolls back
        return results if results is not None else bulk_append(conn, q, jobs, clock, remembered)  # reads them
    now = clock()
    found = json.loads(
        conn.execute(
            q["live_next_seqs"], {"ids": _ENCODER.encode(wanted), "turns": _ENCODER.encode(turns), "now": now}
        ).fetchone()[0]
    )
    if len(found) != len(wanted):
        return None
    values, firsts, moved = _rows(jobs, found, now)
    last_id = _insert_rows(conn, q, values)
    remembered.note(moved)  # if this transaction rolls back, the next batch finds them stale
    return _answers(jobs, firsts, last_id, len(values) // ROW_WIDTH, now)


class RememberedBatch(NamedTuple):
    """A batch on counters the writer remembers: its jobs, the incarnation each
    session is meant as, the remembered counters and the turn tokens its jobs carry."""

    jobs: list[AppendJob]
    wanted: dict[str, str | None]
    start: dict[str, int]
    turns: dict[str, int]


class AloneAppends:
    """Append batches written by one statement outside any transaction. SQLite runs
    such a statement as a transaction of its own (the write lock taken, the COMMIT
    and its fsync done inside it, all or nothing), so the writer runs one statement
    for the batch instead of BEGIN, the INSERT and COMMIT, each of which lets go of
    the GIL that the writer must then win back from its callers. Only a batch on
    counters the writer remembers, whose rows fit one INSERT, is `planned`; the
    checked INSERT refuses stale counters as in a transaction. The clock is read
    just before the statement, which takes the write lock itself: a row's
    created_at may then precede the commit of another process's write that went
    first (by the busy wait at most), as on PostgreSQL, where it is the
    transaction's start. Used by the writer's thread only, like `RememberedCounters`."""

    __slots__ = ("_q", "_clock", "_remembered")

    def __init__(self, q: Mapping[str, str], clock: Callable[[], float], remembered: RememberedCounters) -> None:
        self._q = q
        self._clock = clock
        self._remembered = remembered

    def planned(self, jobs: list[AppendJob]) -> RememberedBatch | None:
        """The batch's plan, if one statement can write it (nothing is written here)."""
        rows = 0
        for job in jobs:
            if job.keyed:
                return None
            rows += len(job.params)
        if rows > ROWS_PER_INSERT:
            return None
        meant = _wanted(jobs)
        if meant is None:
            return None
        start = self._remembered.recall(meant[0])
        return None if start is None else RememberedBatch(jobs, meant[0], start, meant[1])

    def write(self, conn: sqlite3.Connection, plan: RememberedBatch) -> list[tuple[int, list[int], float]] | None:
        """Append ``plan``'s jobs in one statement, committed when it returns; per job
        ``(first_seq, ids, created_at)``. None when a remembered counter was stale:
        nothing was written (the writer then runs the batch in a transaction, which
        reads them)."""
        try:
            return _remembered_append(conn, self._q, plan, self._clock(), self._remembered)
        except _PartlyWritten as exc:  # committed already: nothing to roll back, only to report
            raise TranscriptError(f"{exc}, committed outside a transaction") from exc


class _PartlyWritten(Exception):
    """A checked INSERT wrote some of its rows, not all (its check is all or none:
    only an SQLite that evaluated it again after the first row could)."""


def _remembered_append(
    conn: sqlite3.Connection, q: Mapping[str, str], batch: RememberedBatch, now: float, remembered: RememberedCounters
) -> list[tuple[int, list[int], float]] | None:
    """Append ``batch`` on its remembered counters, the first INSERT checking them; per
    job ``(first_seq, ids, created_at)``, or None when a counter was stale (nothing
    written; the batch's counters are forgotten). Raises `_PartlyWritten`."""
    jobs, wanted, start, turns = batch
    values, firsts, moved = _rows(jobs, start, now)
    last_id = _checked_insert(conn, q, values, [*_expected(wanted, start), _ENCODER.encode(turns), now])
    if last_id is None:
        remembered.forget(wanted)
        return None
    remembered.note(moved)  # if this transaction rolls back, the next batch finds them stale
    return _answers(jobs, firsts, last_id, len(values) // ROW_WIDTH, now)


def _wanted(jobs: list[AppendJob]) -> tuple[dict[str, str | None], dict[str, int]] | None:
    """Each session's incarnation meant and the turn tokens its jobs carry, or None
    when two jobs mean two incarnations, or two turns (or a turn and none), for one id."""
    wanted: dict[str, str | None] = {}
    carried: dict[str, int | None] = {}
    for job in jobs:
        sid = job.session_id
        if wanted.setdefault(sid, job.incarnation) != job.incarnation:
            return None
        if carried.setdefault(sid, job.turn) != job.turn:
            return None
    return wanted, {sid: turn for sid, turn in carried.items() if turn is not None}


def _rows(
    jobs: list[AppendJob],
    start: Mapping[str, int],
    now: float,
) -> tuple[list[Any], list[int], dict[str, int]]:
    """The rows' parameters from the counters ``start``, `ROW_WIDTH` a row in one flat
    list (what the INSERTs bind, without a tuple a row), each job's first seq, and
    the counters past the rows."""
    next_seq = dict(start)
    firsts: list[int] = []
    values: list[Any] = []
    for job in jobs:
        sid = job.session_id
        first = seq = next_seq[sid]
        turn = job.turn
        for p in job.params:
            values += (sid, seq, *_COLUMNS(p), now, turn, p["usage"], row_checksum(p))
            seq += 1
        next_seq[sid] = seq
        firsts.append(first)
    return values, firsts, next_seq


def _answers(
    jobs: list[AppendJob],
    firsts: list[int],
    last_id: int,
    rows: int,
    now: float,
) -> list[tuple[int, list[int], float]]:
    """Per job ``(first_seq, ids, created_at)``. AUTOINCREMENT under the exclusive write
    lock, with no trigger inserting into messages, hands a statement's rows
    consecutive ids: the run's ``rows`` rows are the ones up to ``last_id``, in order."""
    first_id = last_id - rows + 1
    results = []
    for job, first in zip(jobs, firsts):
        count = len(job.params)
        results.append((first, list(range(first_id, first_id + count)), now))
        first_id += count
    return results


def _expected(wanted: Mapping[str, str | None], start: Mapping[str, int]) -> list[Any]:
    """The check of remembered counters, as the checked INSERT's first two parameters
    (the turn tokens and the clock follow):
    the number of sessions and, as one JSON object, each one's remembered counter."""
    # a counter expected at n of any incarnation is the number n; of incarnation i, the
    # text "n i" (the database compares it with next_seq || ' ' || incarnation)
    expected = {sid: n if wanted[sid] is None else f"{n} {wanted[sid]}" for sid, n in start.items()}
    return [len(expected), _ENCODER.encode(expected)]


def _checked_insert(
    conn: sqlite3.Connection, q: Mapping[str, str], values: list[Any], expected: list[Any]
) -> int | None:
    """`_insert_rows` whose first statement checks the remembered counters ``expected``:
    None when it inserted nothing (a counter was stale). Raises `_PartlyWritten`."""
    chunk = values[:_CHUNK]
    rows = len(chunk) // ROW_WIDTH
    sql = _insert_sql(
        q["insert_checked_messages_head"], q["insert_messages_row"], rows, q["insert_checked_messages_tail"]
    )
    cursor = conn.execute(sql, [*expected, *chunk])
    if cursor.rowcount != rows:
        if cursor.rowcount == 0:
            return None
        raise _PartlyWritten(f"a checked INSERT wrote {cursor.rowcount} of its {rows} rows")
    return _insert_rows(conn, q, values[_CHUNK:]) or cursor.lastrowid


def _insert_rows(conn: sqlite3.Connection, q: Mapping[str, str], values: list[Any]) -> int:
    """Insert the rows (`ROW_WIDTH` parameters each) in order, `ROWS_PER_INSERT` per
    statement; the last row's id (0 if none)."""
    last_id = 0
    for start in range(0, len(values), _CHUNK):
        chunk = values[start : start + _CHUNK]
        sql = _insert_sql(q["insert_messages_head"], q["insert_messages_row"], len(chunk) // ROW_WIDTH)
        last_id = conn.execute(sql, chunk).lastrowid or 0  # set by every INSERT that wrote a row
    return last_id


@functools.lru_cache(maxsize=2 * ROWS_PER_INSERT)
def _insert_sql(head: str, row: str, rows: int, tail: str = "") -> str:
    """The INSERT of ``rows`` rows (the same text each time: the statement cache hits)."""
    return head + "\n" + ",\n".join([row] * rows) + tail
