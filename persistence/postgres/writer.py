"""Group commit for PostgreSQL: one writer thread, many sessions' writes per statement.

Appends and plain session creates are queued; a writer thread with its own
connection takes everything queued so far (up to ``max_batch``) and writes it
with one autocommit statement per kind: one round trip and one WAL flush for
the whole batch. Each caller is released after the commit that holds its rows.

A fixed lock order, so two processes' writers can never deadlock each other:
creates insert in id order, and the append statement locks its session rows in
id order (``ORDER BY id FOR NO KEY UPDATE``) before it touches them, each held
until its commit, so seqs are still handed out under the session's row lock in
commit order; ``UNIQUE(session_id, seq)`` and the compaction fence (the lease
row, then the session row) are untouched. A missing or ended session gets no
rows and fails its own requests only. A statement that fails for its data
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
import select
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from protocol import StorageFullError, StoreBusyError, TranscriptError

from .. import killpoints, telemetry
from ..batching import drain, fill_batch
from ..loop_submissions import LoopSubmissions, hand_over_pending
from ..store import WriteStats
from .batch import (
    AppendJob, CreateJob, DoneFn, Pending, append_run, complete_submitted, create_run, release_chain, sweep,
)
from .driver import busy_reason, set_local_timeouts, set_timeouts_sql

__all__ = ["AppendJob", "CreateJob", "PgWriter"]

log = logging.getLogger("session_actors.postgres.writer")

#: Requests per transaction at most (a batch is what was queued when it started).
MAX_BATCH = 512
_BACKOFF_FIRST_S = 0.01
_BACKOFF_MAX_S = 0.25
_LATE_S = 0.05  # a statement sent this late into its batch's patience gets a shorter lock_timeout
_STOP = object()


class PgWriter:
    """The group-commit writer of one `PostgresStore`."""

    def __init__(
        self, connect: Callable[[], Any], queries: Mapping[str, str], *, psycopg: Any,
        patience_s: float, name: str, max_batch: int = MAX_BATCH, pgbouncer: bool = False,
    ) -> None:
        self._pgbouncer = pgbouncer
        self._connect = connect
        self._q = queries
        self._psycopg = psycopg
        self._patience_s = patience_s
        self._max_batch = max_batch
        self._conn: Any = None
        self._lock_timeout: dict[int, float] = {}  # the connection's current lock_timeout
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._submissions = LoopSubmissions(self._queue.put, max_batch)  # submit_nowait's, per loop
        self._lock = threading.Lock()  # closing vs submitting
        self._closed = False
        self._transactions = 0  # committed batches
        self._requests = 0  # requests they held
        self._in_flight = 0  # size of the batch being attempted
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: AppendJob | CreateJob) -> Any:
        """Queue ``job``; its result once committed (or its error)."""
        hand_over_pending()  # this thread's held submissions go first (we may wait on them)
        pending = Pending(job)
        with self._lock:
            if self._closed:
                raise TranscriptError("the store is closed")
            self._queue.put(pending)
        return pending.wait()

    def submit_nowait(self, job: AppendJob, on_done: DoneFn) -> None:
        """Queue ``job`` without waiting: ``on_done(result, error)`` is called once, on
        the writer thread, when the batch holding it has its outcome; it must be quick
        and must not wait on this store. It may return a wake-up the writer calls
        once per batch (each distinct one), after all of the batch's completions.
        Raises `TranscriptError` (nothing queued) once the store is closed.

        From a running event loop the job is held until the end of the loop's
        iteration and queued with the loop's other submissions of that iteration,
        in order (`persistence.loop_submissions`); close() still runs it."""
        self._submissions.submit(Pending(job, on_done))

    def stats(self) -> WriteStats:
        queued = self._queue.qsize() + self._submissions.held()
        return WriteStats(self._transactions, self._requests, self._in_flight, queued)

    def close(self) -> None:
        """Commit what is queued (submissions an event loop still holds included), stop
        the thread, close the connection. Idempotent."""
        self._submissions.close()  # queued before the stop marker: they run
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
        try:
            stopping = False
            while not stopping:
                try:
                    first = self._queue.get_nowait()
                except queue.Empty:
                    sweep(released)  # idle: nobody may wait on a stalled chain meanwhile
                    first = self._queue.get()
                batch = fill_batch(self._queue, [first], self._max_batch)
                if _STOP in batch:
                    stopping = True
                    batch = [p for p in batch if p is not _STOP] + drain(self._queue, _STOP)
                if batch:
                    batch = self._commit(batch)
                sweep(released)  # the previous chain had a whole batch to finish
                released = batch
        finally:
            sweep(released)
            self._disconnect()

    def _commit(self, batch: list[Pending]) -> list[Pending]:
        """Run ``batch`` to an outcome for every request, complete its submitted
        requests, then release its callers (a chain: see `Pending`); returns those."""
        self._in_flight = len(batch)
        try:
            self._commit_with_retries(batch)
        except BaseException as exc:  # never let the writer die with callers waiting
            log.exception("write batch of %d crashed", len(batch))
            for pending in batch:
                pending.result, pending.error = None, TranscriptError(f"write failed: {exc!r}")
        finally:
            self._in_flight = 0
            batch = complete_submitted(batch)
            release_chain(batch)
        return batch

    def _commit_with_retries(self, batch: list[Pending]) -> None:
        deadline = min(p.queued_at for p in batch) + self._patience_s
        creates = sorted((p for p in batch if isinstance(p.job, CreateJob)), key=_session)
        appends = [p for p in batch if isinstance(p.job, AppendJob)]
        if creates:  # first, so an append queued with its session's create finds it
            self._run_statement(creates, self._create_run, deadline)
        if appends:
            self._run_statement(appends, self._append_run, deadline)

    def _run_statement(self, run: list[Pending], execute: Callable[[Any, list[Pending]], None],
                       deadline: float) -> None:
        """``execute`` the run as one autocommit statement, retried while the server
        rolled it back; a statement that fails for its data is replayed request by
        request, so only the guilty request fails."""
        psycopg = self._psycopg
        backoff, attempt = _BACKOFF_FIRST_S, 0
        while True:
            attempt += 1
            for pending in run:
                pending.result, pending.error = None, None
            sent = False
            try:
                cur = self._connection().cursor()
                self._bound_lock_waits(cur, deadline)
                sent = True
                if killpoints.ARMED or self._pgbouncer:
                    self._write_in_transaction(cur, run, execute, deadline)
                else:
                    execute(cur, run)
                self._transactions += 1
                self._requests += len(run)
                return
            except psycopg.errors.DiskFull as exc:  # the statement wrote nothing
                _fail_all(run, StorageFullError(f"the database's disk is full; nothing was written: {exc}"), exc)
                return
            except psycopg.OperationalError as exc:
                terminated = isinstance(exc, psycopg.errors.AdminShutdown)
                if sent and not terminated and not _rolled_back(psycopg, exc):
                    self._disconnect()  # lost while the statement was in flight
                    _fail_all(run, StoreBusyError(
                        "the connection failed while a write was in flight; it may or may not "
                        f"have been applied: {exc}"), exc)
                    return
                if terminated or not sent:
                    # Terminated: the server answered our statement with its own end,
                    # so it rolled the statement back (a commit holds interrupts off and
                    # answers first). Safe to send again, on a new connection.
                    self._disconnect()
                cause: Exception = exc
            except psycopg.Error as exc:
                if len(run) == 1:
                    run[0].error = TranscriptError(f"write of {run[0].job.session_id!r} failed: {exc}")
                    run[0].error.__cause__ = exc
                    return
                log.info("write batch of %d: replaying request by request after %s", len(run), exc)
                for pending in run:
                    self._run_statement([pending], execute, deadline)
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning("write batch of %d gave up after %d attempts: %s", len(run), attempt, cause)
                _fail_all(run, StoreBusyError(
                    f"the database stayed busy for {self._patience_s:g}s (patience_s, {attempt} "
                    f"attempts): {busy_reason(psycopg, cause)}"), cause)
                return
            log.debug("write batch: retrying after %s (attempt %d)", type(cause).__name__, attempt)
            telemetry.busy_retry()
            time.sleep(min(remaining, backoff * random.uniform(0.5, 1.5)))
            backoff = min(backoff * 2, _BACKOFF_MAX_S)

    def _write_in_transaction(self, cur: Any, run: list[Pending],
                              execute: Callable[[Any, list[Pending]], None], deadline: float) -> None:
        """The same statement inside BEGIN ... COMMIT: behind PgBouncer, where the
        timeouts can only be set for the transaction (``SET LOCAL``), and in tests
        with kill points armed, so that each named point of a write transaction exists."""
        operation = "create_session" if isinstance(run[0].job, CreateJob) else "append"
        if killpoints.ARMED:
            killpoints.reached("before_begin", operation)
        cur.execute("BEGIN")
        try:
            if self._pgbouncer:
                set_local_timeouts(cur, deadline - time.monotonic())
            execute(cur, run)
            if killpoints.ARMED:
                killpoints.reached("before_commit", operation)
            cur.execute("COMMIT")
        except BaseException:
            if not cur.connection.closed:
                try:
                    cur.execute("ROLLBACK")
                except self._psycopg.Error:
                    self._disconnect()
            raise
        if killpoints.ARMED:
            killpoints.reached("after_commit", operation)

    def _create_run(self, cur: Any, creates: list[Pending]) -> None:
        create_run(cur, self._q, creates)

    def _append_run(self, cur: Any, appends: list[Pending]) -> None:
        append_run(cur, self._q, appends, self._psycopg)

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
        if conn is not None and not conn.closed and select.select([conn.fileno()], [], [], 0)[0]:
            self._disconnect()
            conn = None
        if conn is None or conn.closed:
            self._conn = conn = self._connect()
        return conn

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken: nothing more to release
                pass


def _session(pending: Pending) -> str:
    return pending.job.session_id


def _rolled_back(psycopg: Any, exc: BaseException) -> bool:
    """A lock timeout, deadlock, serialization failure or cancelled statement: the
    server rolled it back and the connection is fine."""
    errors = psycopg.errors
    return isinstance(exc, (errors.SerializationFailure, errors.DeadlockDetected,
                            errors.LockNotAvailable, errors.QueryCanceled))


def _fail_all(batch: list[Pending], error: TranscriptError, cause: BaseException | None) -> None:
    for pending in batch:
        mine = type(error)(str(error))
        mine.__cause__ = cause
        pending.result, pending.error = None, mine

