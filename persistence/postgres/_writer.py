"""Group commit for PostgreSQL: one writer thread, many sessions' writes per statement.

Appends and plain session creates are queued; a writer thread with its own
connection takes everything queued so far (up to ``max_batch``) and writes it
with one autocommit statement per kind: one round trip and one WAL flush for
the whole batch. Each caller is released after the commit that holds its rows.

A fixed lock order, so two processes' writers can never deadlock each other:
creates insert in id order, and the append statement locks its session rows in
id order (``ORDER BY id FOR NO KEY UPDATE SKIP LOCKED``) before it touches
them, each held until its commit, so seqs are still handed out under the
session's row lock in commit order; ``UNIQUE(session_id, seq)`` and the
compaction fence (the lease row, then the session row) are untouched. A missing
or ended session gets no rows and fails its own requests only. So does a session
whose row another transaction holds: skipped rather than waited for, so one
locked session cannot stall or time out the batch; its requests are set aside
and tried again, in their order and ahead of later requests for it, after a
jittered backoff, until their patience is spent. A statement that fails for its data
(anything but the retryable errors below) wrote nothing, and the batch is
replayed request by request, each in its own transaction, so only the guilty
request fails.

Errors after which the server has rolled the statement back (lock timeout,
deadlock, serialization failure, cancel, the backend terminated while running
it) retry it until the oldest caller's patience is spent (then `StoreBusyError`);
so does a dead connection found before sending (an idle connection the server
terminated is noticed then). A
connection lost while the statement was in flight leaves it unknown whether it
was applied: those callers get `StoreBusyError` saying so, never a silent retry
that could write twice.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from protocol import StoreBusyError, TranscriptError

from .. import _hooks as hooks
from .._batching import drain, fill_batch
from .._store import WriteStats
from ._batch import (
    JSONB_TEXT_LIMIT,
    AppendJob,
    CreateJob,
    DoneFn,
    Pending,
    RowLocked,
    append_payload,
    assign_rows,
    complete_submitted,
    one_incarnation_each,
    refuse,
    release_chain,
    sweep,
)
from ._driver import set_timeouts_sql
from ._pipeline import AppendPipeline, numbered_placeholders, socket_ready
from ._statements import BACKOFF_FIRST_S, BACKOFF_MAX_S, StatementRuns, fail_all
from ._watchdog import Watch, Watchdog

__all__ = ["AppendJob", "CreateJob", "PgWriter"]

log = logging.getLogger("session_actors.postgres.writer")

#: Requests per transaction at most (a batch is what was queued when it started).
MAX_BATCH = 512
_LATE_S = 0.05  # a statement sent this late into its batch's patience gets a shorter lock_timeout
_STOP = object()


class PgWriter:
    """The group-commit writer of one `PostgresStore`."""

    def __init__(
        self,
        connect: Callable[[], Any],
        queries: Mapping[str, str],
        *,
        psycopg: Any,
        patience_s: float,
        name: str,
        max_batch: int = MAX_BATCH,
        pgbouncer: bool = False,
        watchdog: Watchdog,
        server_deadline: Callable[[float], float],
        resync_clock: Callable[[], None],
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._pgbouncer = pgbouncer
        self._clock = clock  # the store's, when given: the batch statement's now (else the server's)
        self._connect = connect
        self._watchdog = watchdog
        self._server_deadline = server_deadline
        self._resync_clock = resync_clock
        self._watch: Watch | None = None  # the connection's, cut once its oldest caller is overdue
        self._until: float | None = None  # the deadline of the oldest request in flight
        self._q = queries
        self._psycopg = psycopg
        self._patience_s = patience_s
        self._max_batch = max_batch
        self._conn: Any = None
        self._lock_timeout: dict[int, float] = {}  # the connection's current lock_timeout
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()  # closing vs submitting
        self._closed = False
        self._transactions = 0  # committed batches
        self._requests = 0  # requests they held
        self._in_flight = 0  # requests of the batches being attempted
        self._held: list[Pending] = []  # taken from the queue, to go in the next batch
        self._locked_out: list[Pending] = []  # skipped for a row another transaction holds
        self._retry_locked_at = 0.0  # when they go in a batch again
        self._locked_backoff = BACKOFF_FIRST_S
        self._pipe: AppendPipeline | None = None  # the pipeline of the current connection
        self._no_pipeline = False  # the batch statement could not be prepared: plain way only
        self._unanswered: list[list[Pending]] = []  # batches sent down the pipeline, not yet settled
        self._batch_sql = numbered_placeholders(queries["append_batch"], ("rows", "wanted", "turns", "until", "now"))
        self._statements = StatementRuns(self)  # the plain way: one statement per run, its retries
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: AppendJob | CreateJob) -> Any:
        """Queue ``job``; its result once committed (or its error)."""
        pending = Pending(job)
        with self._lock:
            if self._closed:
                pending.done.close()
                raise TranscriptError("the store is closed")
            self._queue.put(pending)
        return pending.wait()

    def submit_nowait(self, job: AppendJob, on_done: DoneFn) -> None:
        """Queue ``job`` without waiting: ``on_done(result, error)`` is called once, on
        the writer thread, when the batch holding it has its outcome; it must be quick
        and must not wait on this store. It may return a wake-up the writer calls
        once per batch (each distinct one), after all of the batch's completions."""
        pending = Pending(job, on_done)
        with self._lock:
            if self._closed:
                raise TranscriptError("the store is closed")
            self._queue.put(pending)

    def stats(self) -> WriteStats:
        queued = self._queue.qsize() + len(self._held) + len(self._locked_out)  # for a later batch
        return WriteStats(self._transactions, self._requests, self._in_flight, queued)

    def close(self) -> None:
        """Commit what is queued, stop the thread, close the connection. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        if self._thread is not threading.current_thread():
            self._thread.join()

    # -- writer thread -------------------------------------------------------------

    def _run(self) -> None:
        released: list[Pending] = []  # the last batch, whose callers its chain releases
        flight: list[Pending] | None = None  # an append batch in the pipeline
        stopping = False
        try:
            while flight is not None or self._held or self._locked_out or not stopping:
                if flight is None:
                    if not self._held and not self._locked_due():
                        self._wait_for_work(stopping, released)
                    batch, stopping = self._take(stopping)
                    if not batch:
                        continue
                    self._arm(batch)
                    if self._can_pipeline(batch) and self._send_first(batch):
                        flight = batch
                        continue
                    done = self._commit(batch)  # (if sending failed, nothing was committed)
                else:
                    self._arm([p for batch in self._unanswered for p in batch])
                    done, flight, stopping = self._land_guarded(flight, stopping)
                self._arm([p for batch in self._unanswered for p in batch])
                sweep(released)  # the previous chain had a whole batch to finish
                released = done
        finally:
            sweep(released)
            self._disconnect()

    def _arm(self, waiting: list[Pending]) -> None:
        """Watch the connection until the deadline of the oldest of ``waiting`` (the
        requests about to be, or being, written; none: nothing to watch)."""
        self._until = min(p.queued_at for p in waiting) + self._patience_s if waiting else None
        if self._watch is not None:
            self._watch.until = self._until

    def _wait_for_work(self, stopping: bool, released: list[Pending]) -> None:
        """Until a request is queued (then held for the next batch) or the locked-out
        requests are due again."""
        wait = max(0.0, self._retry_locked_at - time.monotonic()) if self._locked_out else None
        if stopping:  # the queue is drained: only locked-out requests are left
            time.sleep(wait or 0.0)
            return
        try:
            first = self._queue.get_nowait()
        except queue.Empty:
            sweep(released)  # idle: nobody may wait on a stalled chain meanwhile
            try:
                first = self._queue.get(timeout=wait)
            except queue.Empty:
                return
        self._held.append(first)

    def _locked_due(self) -> bool:
        return bool(self._locked_out) and time.monotonic() >= self._retry_locked_at

    def _take(self, stopping: bool, busy: list[Pending] | None = None) -> tuple[list[Pending], bool]:
        """The next batch: the requests held back first, then what is queued (up to
        ``max_batch``; on close, everything). A request for a session of ``busy`` (a
        batch still in flight) is held back for the batch after: a session's
        requests commit in the order they were queued, whatever becomes of ``busy``."""
        batch, self._held = self._held, []
        if not stopping:
            batch = fill_batch(self._queue, batch, self._max_batch)
            if _STOP in batch:
                stopping = True
                batch = [p for p in batch if p is not _STOP] + drain(self._queue, _STOP)
        if busy is not None and batch:
            sessions = {p.job.session_id for p in busy}
            self._held = [p for p in batch if p.job.session_id in sessions]
            if self._held:
                batch = [p for p in batch if p.job.session_id not in sessions]
        return self._with_locked_out(batch), stopping

    def _with_locked_out(self, batch: list[Pending]) -> list[Pending]:
        """``batch`` with the locked-out requests in front once they are due; until
        then, a request for one of their sessions waits with them, so a session's
        requests still commit in the order they were queued."""
        if not self._locked_out:
            return batch
        if self._locked_due():
            batch, self._locked_out = self._locked_out + batch, []
            return batch
        sessions = {p.job.session_id for p in self._locked_out}
        self._locked_out += [p for p in batch if p.job.session_id in sessions]
        return [p for p in batch if p.job.session_id not in sessions]

    def _lock_out(self, batch: list[Pending]) -> list[Pending]:
        """Set aside, for a later batch, the requests skipped for a session row another
        transaction holds (`RowLocked`) whose patience is not spent; returns the rest,
        whose outcome is final."""
        now = time.monotonic()
        final = []
        for pending in batch:
            if not isinstance(pending.error, RowLocked):
                final.append(pending)
            elif now < pending.queued_at + self._patience_s:
                pending.error = None
                self._locked_out.append(pending)
            else:
                pending.error = RowLocked(
                    f"append to {pending.job.session_id!r}: its session row stayed locked by another "
                    f"transaction for {self._patience_s:g}s (patience_s); nothing was written"
                )
                final.append(pending)
        if len(final) < len(batch):
            delay = self._locked_backoff * random.uniform(0.5, 1.5)
            self._retry_locked_at = now + delay
            self._locked_backoff = min(self._locked_backoff * 2, BACKOFF_MAX_S)
        elif not self._locked_out:
            self._locked_backoff = BACKOFF_FIRST_S
        return final

    def _commit(self, batch: list[Pending], failed: BaseException | None = None, sent: bool = True) -> list[Pending]:
        """Run ``batch`` to an outcome for every request, complete its submitted
        requests, then release its callers (a chain: see `Pending`); returns those.
        ``failed``: how its attempt in the pipeline ended (``sent``: it may have
        reached the server), the first of its attempts."""
        self._in_flight = len(batch)
        try:
            self._statements.commit_with_retries(batch, failed, sent)
        except BaseException as exc:  # never let the writer die with callers waiting
            log.exception("write batch of %d crashed", len(batch))
            for pending in batch:
                pending.result, pending.error = None, TranscriptError(f"write failed: {exc!r}")
        finally:
            self._in_flight = 0
        return self._complete(batch)

    def _complete(self, batch: list[Pending]) -> list[Pending]:
        batch = complete_submitted(self._lock_out(batch))
        release_chain(batch)
        return batch

    # -- the pipeline ----------------------------------------------------------------

    def _can_pipeline(self, batch: list[Pending]) -> bool:
        """Whether ``batch`` can go down the pipeline: appends only, one incarnation
        meant per id; not behind PgBouncer."""
        if self._pgbouncer or self._no_pipeline:
            return False
        if any(type(pending.job) is not AppendJob for pending in batch):
            return False
        return not one_incarnation_each(batch)[1]  # those split off need a statement of their own

    def _send_first(self, batch: list[Pending]) -> bool:
        """Send ``batch`` with nothing else in flight; False if that failed, whatever
        the error (the Sync is the last thing sent, so nothing was committed: the plain
        way takes it, and reconnects if need be)."""
        preparing = False
        try:
            conn = self._connection()
            if self._pipe is None or self._pipe.conn is not conn:
                preparing, self._pipe = True, None
                self._pipe = AppendPipeline(conn, self._batch_sql, self._psycopg)
                preparing = False
            if not self._send(self._pipe, batch):
                return False
        except Exception as exc:  # any: the writer must not die with callers waiting
            self._unanswered.clear()
            psycopg = self._psycopg
            if not isinstance(exc, psycopg.Error):
                log.exception("sending a write batch down the pipeline failed; writing it the plain way")
            elif preparing and not isinstance(exc, psycopg.OperationalError):
                log.warning("the batch statement cannot be prepared; writing without a pipeline: %s", exc)
                self._no_pipeline = True
            self._disconnect()
            return False
        return True

    def _send(self, pipe: AppendPipeline, batch: list[Pending]) -> bool:
        """Send ``batch`` down the pipeline; a late one (see `_bound_lock_waits`) with
        timeouts of its own, for its transaction alone. False, nothing sent, for a
        batch too big for the prepared statement's jsonb (the plain way reads it as json)."""
        rows, wanted, turns = append_payload(p.job for p in batch)
        if len(rows) > JSONB_TEXT_LIMIT:
            return False
        remaining = min(p.queued_at for p in batch) + self._patience_s - time.monotonic()
        timeout = self._patience_s if remaining >= self._patience_s - _LATE_S else max(0.001, remaining)
        own = timeout != self._lock_timeout.get(id(self._conn), self._patience_s)
        self._in_flight += len(batch)
        self._unanswered.append(batch)
        timeout_ms = max(1, int(timeout * 1000)) if own else None
        until = repr(self._server_deadline(remaining + time.monotonic())).encode()
        now = self._now()
        # the batch's Sync leaves with it: its commit is asked for as it is sent
        hooks.point("before_begin", "append")
        hooks.point("before_commit", "append")
        stamp = None if now is None else repr(now).encode()
        pipe.send(rows.encode(), wanted.encode(), turns.encode(), until, stamp, timeout_ms)  # ASCII: batch._ROWS
        return True

    def _answer(self, batch: list[Pending]) -> list[Pending]:
        """``batch`` leaves the pipeline's books (it is settled from here on)."""
        self._unanswered = [b for b in self._unanswered if b is not batch]
        return batch

    def _land_guarded(self, flight: list[Pending], stopping: bool) -> tuple[list[Pending], list[Pending] | None, bool]:
        """`_land`, never letting the writer die with callers waiting: a crash fails
        every batch in the pipeline not yet settled (on a new connection from here),
        as unknown: its Sync was sent, so the server may well have committed it."""
        try:
            return self._land(flight, stopping)
        except BaseException as exc:
            log.exception("landing a pipelined write batch crashed")
            self._disconnect()
            done: list[Pending] = []
            for batch in self._unanswered:
                fail_all(
                    batch,
                    StoreBusyError(f"write failed while in flight; it may or may not have been applied: {exc!r}"),
                    exc,
                )
                done += self._complete(batch)
            self._unanswered.clear()
            self._in_flight = 0
            return done, None, stopping

    def _land(
        self, flight: list[Pending], stopping: bool, send_next: bool = True
    ) -> tuple[list[Pending], list[Pending] | None, bool]:
        """Take the outcome of ``flight`` (the oldest batch in the pipeline): once its
        rows are back, its commit (the WAL flush) is under way, and the next batch is
        sent to follow it. ``flight`` is answered only once its Sync is. Returns the
        callers released, the batch now in flight (or None) and ``stopping``."""
        pipe = self._pipe
        assert pipe is not None
        try:
            fetched = pipe.rows()
        except self._psycopg.Error as exc:  # nothing else in flight: the plain way decides
            return self._commit(self._answer(flight), exc), None, stopping
        refused = assign_rows(flight, fetched)
        following, unsent = None, None
        if send_next and not refused:  # a refusal is read after the commit, with nothing in flight
            batch, stopping = self._take(stopping, busy=flight)
            piped = False  # (a batch too big for the pipeline waits for the plain way)
            if batch and self._can_pipeline(batch):
                try:
                    piped = self._send(pipe, batch)
                except self._psycopg.Error as exc:
                    piped, unsent = True, exc
            if piped:
                following = batch
            elif batch:
                self._held[:0] = batch
        try:
            pipe.committed()
        except self._psycopg.Error as exc:
            return self._land_failed(flight, exc, following, unsent, stopping)
        hooks.point("after_commit", "append")
        self._transactions += 1
        self._requests += len(flight)
        self._in_flight -= len(flight)
        if refused:
            self._refuse(refused)
        return self._complete(self._answer(flight)), following, stopping

    def _land_failed(
        self,
        flight: list[Pending],
        exc: BaseException,
        following: list[Pending] | None,
        unsent: BaseException | None,
        stopping: bool,
    ) -> tuple[list[Pending], list[Pending] | None, bool]:
        """``flight`` failed at its commit; the batch sent after it still runs on a
        live connection (land it first: their sessions differ), and on a lost one
        shares its fate (a termination ran neither; otherwise both are unknown)."""
        done: list[Pending] = []
        if following is not None:
            if unsent is not None:
                done += self._commit(self._answer(following), unsent, sent=False)
            elif self._pipe is not None and self._pipe.in_flight:
                landed, _, stopping = self._land(following, stopping, send_next=False)
                done += landed
            else:
                done += self._commit(self._answer(following), exc)
        return self._commit(self._answer(flight), exc) + done, None, stopping

    def _now(self) -> float | None:
        """The store's clock when it was given one, else None (the server's); a
        statement's deadline stays on the server's clock either way."""
        return None if self._clock is None else float(self._clock())

    def _refuse(self, refused: list[Pending]) -> None:
        try:
            refuse(self._connection().cursor(), self._q, refused, self._psycopg, self._now())
        except self._psycopg.Error as exc:
            for pending in refused:
                pending.error = StoreBusyError(
                    f"append to {pending.job.session_id!r} was refused, and reading why failed: {exc}"
                )

    # -- connection ----------------------------------------------------------------

    def _bound_lock_waits(self, cur: Any, deadline: float) -> None:
        """A statement sent late in its batch's patience (a retry, or queued behind one)
        may wait for a lock only until the deadline: the connection's lock_timeout
        follows what is left, and goes back to ``patience_s`` for a fresh batch."""
        if self._pgbouncer:  # no session SETs there: `_write_in_transaction` sets them locally
            return
        remaining = deadline - time.monotonic()
        wanted = self._patience_s if remaining >= self._patience_s - _LATE_S else max(0.001, remaining)
        if self._lock_timeout.get(id(cur.connection)) != wanted:
            cur.execute(set_timeouts_sql(wanted))
            self._lock_timeout = {id(cur.connection): wanted}

    def _connection(self) -> Any:
        """The writer's connection, replaced when it is closed or looks dead: an idle
        connection with something to read was told something unasked, typically
        its termination (a dead connection found here wrote nothing, so its batch
        is simply sent on a new one)."""
        conn = self._conn
        if conn is not None and not conn.closed and socket_ready(conn.fileno(), timeout_s=0):
            self._disconnect()
            conn = None
        if conn is None or conn.closed:
            self._conn = conn = self._connect()
            self._watch = self._watchdog.watch(conn, self._until)
        return conn

    def _disconnect(self) -> None:
        if self._watch is not None:
            self._watchdog.unwatch(self._watch)  # before the close frees its descriptor
            self._watch = None
        conn, self._conn = self._conn, None
        self._lock_timeout = {}  # a new connection starts with patience_s (`driver.PgDatabase.connect`)
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken: nothing more to release
                pass
