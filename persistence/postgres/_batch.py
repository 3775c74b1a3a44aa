"""What one group-commit statement writes, and how each request takes its outcome back.

The writer (`persistence.postgres._writer`) runs these on its own connection; each
sets ``result`` or ``error`` on every request of its run and raises only what the
statement itself raised (the writer decides whether to retry or replay).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from protocol import (
    SessionExistsError,
    SessionNotFoundError,
    StoreBusyError,
    TranscriptError,
)

from .._batching import linked_chains
from .._latch import Latch
from .._rows import turn_refusal
from .._submitted import woken
from ..sql._lineage import ended_error, require_incarnation
from ..sql._messages import AppendJob

__all__ = [
    "JSONB_TEXT_LIMIT",
    "AppendJob",
    "CreateJob",
    "DoneFn",
    "Pending",
    "RowLocked",
    "Wake",
    "append_payload",
    "append_run",
    "assign_rows",
    "complete_submitted",
    "create_many",
    "create_run",
    "one_incarnation_each",
    "refusal",
    "refuse",
    "release_chain",
    "sweep",
    "waiting_for_locks",
]

log = logging.getLogger("session_actors.postgres.writer")

#: The longest ``rows`` text the batch statement reads as jsonb. A jsonb value holds
#: at most 268435455 bytes (PostgreSQL's limit on a container or a string), and a
#: batch takes up to about 1.7 times its JSON text as jsonb (a header per row); a
#: longer batch is read as json (each ``->>`` scans its row again: more server CPU,
#: but good up to the 1 GB of a parameter), as the statement read every batch before.
JSONB_TEXT_LIMIT = 128 * 1024 * 1024
_AS_JSONB = "jsonb_array_elements(%(rows)s::jsonb)"

#: A wake-up a completion may return: the writer calls each distinct one once per batch.
Wake = Callable[[], None]
#: ``on_done(result, error)`` of a submitted request, called once on the writer thread.
DoneFn = Callable[[Any, "BaseException | None"], "Wake | None"]


class CreateJob(NamedTuple):
    """Create a root session (no parent). Result: the new session's row."""

    session_id: str
    source: str
    metadata: str = "{}"  # JSON object text, checked
    incarnation: str = ""  # a fresh lineage's (`rows.new_incarnation`)


class Pending:
    """One queued job and its outcome. ``done`` is a `Latch` held until the outcome
    is set (much cheaper than an Event for thousands of waiters, and its wake-up
    lets go of the GIL).

    The callers of a batch are released in a few chains (`batching.linked_chains`):
    the writer releases each chain's first, and each caller releases the next of its
    chain as soon as it wakes, so they wake a few at a time instead of all at once
    fighting for the GIL (which the writer needs for the next batch) and the writer
    makes a few wake-up calls per batch, not one per caller. ``claim`` makes a release one-shot, so the writer can sweep a chain a
    caller stalled (interrupted while it waited) without releasing anyone twice.

    A request submitted without a waiting thread (``on_done`` set) is completed by
    the writer instead (`complete_submitted`) and has no locks: an event loop keeps
    dozens in flight, and fewer objects each mean fewer for the garbage collector to
    promote (see `persistence.sqlite._writer._Request`).
    """

    __slots__ = ("job", "queued_at", "done", "claim", "next", "result", "error", "on_done")

    def __init__(self, job: AppendJob | CreateJob, on_done: DoneFn | None = None) -> None:
        self.job: Any = job  # an AppendJob or a CreateJob: the writer batches each kind apart
        self.on_done = on_done
        self.queued_at = time.monotonic()
        if on_done is None:
            self.done = Latch()
            self.claim = threading.Lock()
        else:
            self.done = self.claim = None  # type: ignore[assignment]  # never waited on (on_done set)
        self.next: Pending | None = None  # the caller to release after this one
        self.result: Any = None
        self.error: BaseException | None = None

    def release(self) -> None:
        """Let the caller go (its outcome is set); only the first call counts. A
        submitted request has no caller to let go."""
        claim = self.claim
        if claim is not None and claim.acquire(False):
            self.done.set()

    def wait(self) -> Any:
        self.done.wait()
        if self.next is not None:
            self.next.release()
        if self.error is not None:
            raise self.error
        return self.result


def complete_submitted(batch: list[Pending]) -> list[Pending]:
    """Complete the submitted requests of ``batch`` (their outcome is final), then
    call each distinct wake-up their completions returned, once; returns the
    requests whose callers wait, for the release chain."""
    if all(pending.on_done is None for pending in batch):
        return batch
    waiting: list[Pending] = []
    wakes: dict[Wake, None] = {}  # each distinct one once, in order (equal bound methods are one)
    for pending in batch:
        if pending.on_done is None:
            waiting.append(pending)
            continue
        try:
            wake = pending.on_done(pending.result, pending.error)
        except BaseException:  # never let the writer die of a completion
            log.exception("completing a submitted append to %s failed", pending.job.session_id)
            continue
        if wake is not None:
            wakes[wake] = None
    woken(wakes, log)
    return waiting


def release_chain(batch: list[Pending]) -> None:
    """Release the callers of ``batch``, each by the one before it in its chain
    (`batching.linked_chains`)."""
    for head in linked_chains(batch):
        head.release()


def sweep(batch: list[Pending]) -> None:
    """Release whoever of an earlier batch's chain still waits (a caller before it
    was interrupted while waiting and never passed the release on)."""
    for pending in batch:
        pending.release()


def create_many(
    cur: Any,
    queries: Mapping[str, str],
    rows: list[tuple[str, str, str, str]],
    until: float | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """Insert sessions from (id, source, metadata JSON text, incarnation) rows, in id
    order, with one statement; the rows created, by id (a taken id has none).
    ``until``: the statement's deadline on the server's clock (`call_deadline_check`;
    None when the transaction's COMMIT checks it). ``now``: the store's clock (None:
    the server's)."""
    cur.execute(queries["create_sessions"], {"rows": _ROWS.encode(rows), "until": until, "now": now})
    return {row["id"]: row for row in cur.fetchall()}


def create_run(
    cur: Any, queries: Mapping[str, str], creates: list[Pending], until: float | None, now: float | None
) -> None:
    """Insert every distinct id of ``creates`` (sorted by id) with one statement; an
    id asked twice, or already present, is `SessionExistsError` for that caller.
    ``until``: the statement's deadline on the server's clock (`call_deadline_check`);
    ``now``: the store's clock (None: the server's)."""
    first: dict[str, Pending] = {}
    for pending in creates:
        if pending.job.session_id in first:
            pending.error = SessionExistsError(pending.job.session_id)
        else:
            first[pending.job.session_id] = pending
    rows = [(sid, p.job.source, p.job.metadata, p.job.incarnation) for sid, p in first.items()]
    created = create_many(cur, queries, rows, until, now)
    for sid, pending in first.items():
        row = created.get(sid)
        if row is None:
            pending.error = SessionExistsError(sid)
        else:
            pending.result = row


def append_run(
    cur: Any, queries: Mapping[str, str], appends: list[Pending], psycopg: Any, until: float | None, now: float | None
) -> None:
    """One statement writes every row; then each request takes its rows back
    (`assign_rows`). Rows come back as tuples ``(id, session_id, seq, created_at)``.
    ``until``: the statement's deadline on the server's clock (`call_deadline_check`);
    ``now``: the store's clock (None: the server's)."""
    appends, later = one_incarnation_each(appends)
    if later:  # requests meaning another incarnation of an id: their own statement
        append_run(cur, queries, later, psycopg, until, now)
    rows, wanted, turns = append_payload(p.job for p in appends)
    sql = queries["append_batch"]
    if len(rows) > JSONB_TEXT_LIMIT:  # too big for jsonb
        sql = _read_as_json(sql)
    factory, cur.row_factory = cur.row_factory, psycopg.rows.tuple_row  # cheaper than dicts
    try:
        cur.execute(sql, {"rows": rows, "wanted": wanted, "turns": turns, "until": until, "now": now})
        fetched = cur.fetchall()
    finally:
        cur.row_factory = factory
    refuse(cur, queries, assign_rows(appends, fetched), psycopg, now)


def waiting_for_locks(sql: str) -> str:
    """The batch statement waiting for a locked session row instead of skipping it:
    for an append in a transaction of its own (a keyed one), which may wait."""
    if _SKIP_LOCKED not in sql:
        raise AssertionError(f"append_batch no longer locks with {_SKIP_LOCKED}")
    return sql.replace(_SKIP_LOCKED, "FOR NO KEY UPDATE")


_SKIP_LOCKED = "FOR NO KEY UPDATE SKIP LOCKED"


def _read_as_json(sql: str) -> str:
    """The batch statement reading its rows as json instead of jsonb."""
    if _AS_JSONB not in sql:
        raise AssertionError(f"append_batch no longer reads its rows as {_AS_JSONB}")
    return sql.replace(_AS_JSONB, "json_array_elements(%(rows)s::json)")


def append_payload(jobs: Iterable[AppendJob]) -> tuple[str, str, str]:
    """The ``rows``, ``wanted`` and ``turns`` parameters of the batch statement for
    ``jobs`` (one incarnation and turn meant per id: `one_incarnation_each`). Keys
    are None in a group-commit batch: a keyed append runs alone (`postgres._keys`),
    through this statement too."""
    jobs = list(jobs)
    wanted = {job.session_id: job.incarnation for job in jobs}
    turns = {job.session_id: job.turn for job in jobs if job.turn is not None}
    rows = [
        (
            job.session_id,
            p["role"],
            p["content"],
            p["name"],
            p["tool_call_id"],
            p["tool_calls"],
            p["meta"],
            job.turn,
            p["key"],
            p["usage"],
        )
        for job in jobs
        for p in job.params
    ]
    return _ROWS.encode(rows), _ROWS.encode(wanted), _ROWS.encode(turns)


def assign_rows(appends: list[Pending], fetched: list[tuple[Any, ...]]) -> list[Pending]:
    """Set each request's result from the rows the statement returned: a session's
    rows come numbered in batch order, so its requests' chunks follow one another.
    Returns the requests that got no rows (refused: `refuse` says why)."""
    written: dict[str, list[tuple[Any, ...]]] = {}
    for row in fetched:
        written.setdefault(row[1], []).append(row)
    for rows in written.values():
        rows.sort(key=_seq)
    refused = []
    for pending in appends:
        mine_all = written.get(pending.job.session_id)
        if not mine_all:
            refused.append(pending)
            continue
        count = len(pending.job.params)
        mine = mine_all[:count]
        del mine_all[:count]
        pending.result = (mine[0][2], [row[0] for row in mine], mine[0][3])
    return refused


def refuse(cur: Any, queries: Mapping[str, str], refused: list[Pending], psycopg: Any, now: float | None) -> None:
    """Fail each refused request with why (read after the statement committed)."""
    for pending in refused:
        pending.error = refusal(cur, queries, pending.job, psycopg, now)


class RowLocked(StoreBusyError):
    """An append got no rows for no reason of its own: the batch statement skipped
    its session's row, locked by another transaction. The writer tries it again in a
    later batch, until its patience is spent (then the caller gets this error)."""


def _turn_refusing(
    cur: Any, queries: Mapping[str, str], session_id: str, turn: int | None, now: float | None
) -> TranscriptError | None:
    """The turn lease's error if it refuses a write carrying ``turn`` now (the batch
    statement's own test, on the store's clock; `turn_refusal`), else None."""
    row = cur.execute(queries["turn_of"], {"session_id": session_id, "now": now}).fetchone()
    if row is None:
        return SessionNotFoundError(session_id)
    live = row["turn_live"]
    # a write without a token needs no turn held (a dead one admits nobody)
    allowed = row["turn_holder"] is None if turn is None else live and row["turn_token"] == turn
    return None if allowed else turn_refusal(session_id, row, live=live, turn=turn)


def refusal(cur: Any, queries: Mapping[str, str], job: AppendJob, psycopg: Any, now: float | None) -> TranscriptError:
    """Why an append got no rows: its session is missing, another incarnation, ended
    or under another holder's turn (read after the statement, which committed the
    rest of the batch; ``now``: the store's clock, None: the server's), else `RowLocked`."""
    session_id = job.session_id
    try:
        row = require_incarnation(cur, queries, session_id, job.incarnation)
        if row["ended_at"] is not None:
            return ended_error(cur, queries, session_id)
        held = _turn_refusing(cur, queries, session_id, job.turn, now)
        if held is not None:
            return held
        return RowLocked(f"append to {session_id!r}: its session row stayed locked by another transaction")
    except SessionNotFoundError as exc:
        return exc
    except psycopg.Error as exc:
        error = StoreBusyError(f"append to {session_id!r} was refused, and reading why failed: {exc}")
        error.__cause__ = exc
        return error


#: The rows of a batch as one JSON document, ASCII only: a text the client cannot
#: fail to encode (a lone surrogate, which no check should let through, becomes
#: the server's error for its own request, not a failure of the whole batch).
_ROWS = json.JSONEncoder(ensure_ascii=True, check_circular=False, separators=(",", ":"))


def _seq(row: tuple[Any, ...]) -> int:
    return row[2]


def one_incarnation_each(appends: list[Pending]) -> tuple[list[Pending], list[Pending]]:
    """Split off the requests meaning another incarnation of an id, or another turn,
    than the first request for it (rare: two registries of one process across an
    erasure; a turn's last append and the first after it)."""
    meant: dict[str, tuple[str | None, int | None]] = {}
    first: list[Pending] = []
    later: list[Pending] = []
    for pending in appends:
        job = pending.job
        same = meant.setdefault(job.session_id, (job.incarnation, job.turn)) == (job.incarnation, job.turn)
        (first if same else later).append(pending)
    return first, later
