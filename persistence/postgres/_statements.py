"""The writer's statements: one batch statement, its retries, and what a failure means.

`StatementRuns` works for a `PgWriter` (its `WriterHost`): a batch's
creates and appends each go to the server as one statement, retried while the
server rolled it back (until the oldest caller's patience is spent), replayed
request by request when it failed for its data, and failed as "may or may not
have been applied" when the connection was lost while it was in flight. The
module docstring of `_writer.py` says why each error is handled as it is.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from protocol import StorageFullError, StoreBusyError, TranscriptError

from .. import _hooks as hooks
from .. import _telemetry as telemetry
from ._batch import AppendJob, CreateJob, Pending, append_run, create_run
from ._driver import busy_reason, checked_commit_sql, past_deadline, set_local_timeouts, stalled_reason

if TYPE_CHECKING:
    from ._watchdog import Watch

__all__ = ["BACKOFF_FIRST_S", "BACKOFF_MAX_S", "StatementRuns", "WriterHost", "fail_all"]

log = logging.getLogger("session_actors.postgres.writer")

BACKOFF_FIRST_S = 0.01
BACKOFF_MAX_S = 0.25


class WriterHost(Protocol):
    """What `StatementRuns` reads and counts of its `PgWriter` (the writer's own state)."""

    _psycopg: Any
    _patience_s: float
    _pgbouncer: bool
    _q: Mapping[str, str]
    _watch: Watch | None
    _transactions: int
    _requests: int
    _server_deadline: Callable[[float], float]
    _resync_clock: Callable[[], None]

    def _connection(self) -> Any: ...
    def _now(self) -> float | None: ...
    def _bound_lock_waits(self, cur: Any, deadline: float) -> None: ...
    def _disconnect(self) -> None: ...


class StatementRuns:
    """The statement steps of a `PgWriter`, run on its writer thread."""

    def __init__(self, host: WriterHost) -> None:
        self._host = host

    def commit_with_retries(self, batch: list[Pending], failed: BaseException | None, sent: bool) -> None:
        deadline = min(p.queued_at for p in batch) + self._host._patience_s
        if failed is not None:  # appends only, their first attempt made in the pipeline
            self._run_statement(batch, self._append_run, deadline, failed, sent)
            return
        creates = sorted((p for p in batch if isinstance(p.job, CreateJob)), key=_session)
        appends = [p for p in batch if isinstance(p.job, AppendJob)]
        if creates:  # first, so an append queued with its session's create finds it
            self._run_statement(creates, self._create_run, deadline)
        if appends:
            self._run_statement(appends, self._append_run, deadline)

    def _run_statement(
        self,
        run: list[Pending],
        execute: Callable[[Any, list[Pending], float], None],
        deadline: float,
        failed: BaseException | None = None,
        sent: bool = True,
    ) -> None:
        """``execute`` the run as one autocommit statement, retried while the server
        rolled it back; a statement that fails for its data is replayed request by
        request, so only the guilty request fails. ``failed``: how a first attempt
        already made (in the pipeline) ended, ``sent`` whether it reached the server."""
        backoff, attempt = BACKOFF_FIRST_S, 1
        if failed is None:
            failed, sent = self._attempt(run, execute, deadline)
        while failed is not None:
            cause = self._settle(run, execute, deadline, failed, sent)
            if cause is None:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning("write batch of %d gave up after %d attempts: %s", len(run), attempt, cause)
                fail_all(
                    run,
                    StoreBusyError(
                        f"the database stayed busy for {self._host._patience_s:g}s (patience_s, {attempt} "
                        f"attempts): {busy_reason(self._host._psycopg, cause)}"
                    ),
                    cause,
                )
                return
            log.debug("write batch: retrying after %s (attempt %d)", type(cause).__name__, attempt)
            telemetry.busy_retry()
            time.sleep(min(remaining, backoff * random.uniform(0.5, 1.5)))
            backoff = min(backoff * 2, BACKOFF_MAX_S)
            attempt += 1
            failed, sent = self._attempt(run, execute, deadline)

    def _attempt(
        self, run: list[Pending], execute: Callable[[Any, list[Pending], float], None], deadline: float
    ) -> tuple[BaseException | None, bool]:
        """One try: None if it committed, else its error and whether it was sent."""
        for pending in run:
            pending.result, pending.error = None, None
        sent = False
        try:
            cur = self._host._connection().cursor()
            self._host._bound_lock_waits(cur, deadline)
            sent = True
            if self._host._pgbouncer:
                self._write_in_transaction(cur, run, execute, deadline)
            else:
                self._write_alone(cur, run, execute, deadline)
        except self._host._psycopg.Error as exc:
            return exc, sent
        self._host._transactions += 1
        self._host._requests += len(run)
        return None, True

    def _settle(
        self,
        run: list[Pending],
        execute: Callable[[Any, list[Pending], float], None],
        deadline: float,
        exc: BaseException,
        sent: bool,
    ) -> Exception | None:
        """After a failed try: set the outcomes it decides and return None, or return
        the cause to retry after (the server rolled the statement back)."""
        psycopg = self._host._psycopg
        for pending in run:
            pending.result = None
        if isinstance(exc, psycopg.errors.DiskFull):  # the statement wrote nothing
            fail_all(run, StorageFullError(f"the database's disk is full; nothing was written: {exc}"), exc)
            return None
        if past_deadline(exc) and time.monotonic() < deadline:
            self._host._resync_clock()  # refused as late before its deadline: the server's clock was stepped
        if isinstance(exc, psycopg.OperationalError):
            terminated = isinstance(exc, psycopg.errors.AdminShutdown)
            if sent and not terminated and not _rolled_back(psycopg, exc):
                fail_all(run, self._lost_in_flight(exc), exc)
                self._host._disconnect()  # lost while the statement was in flight
                return None
            if terminated or not sent:
                # Terminated: the server answered our statement with its own end,
                # so it rolled the statement back (a commit holds interrupts off and
                # answers first). Safe to send again, on a new connection.
                self._host._disconnect()
            return exc
        if len(run) == 1:
            run[0].error = TranscriptError(f"write of {run[0].job.session_id!r} failed: {exc}")
            run[0].error.__cause__ = exc
            return None
        log.info("write batch of %d: replaying request by request after %s", len(run), exc)
        for pending in run:
            self._run_statement([pending], execute, deadline)
        return None

    def _lost_in_flight(self, exc: BaseException) -> StoreBusyError:
        if self._host._watch is not None and self._host._watch.cut:
            return StoreBusyError(
                f"the database stopped answering a write ({stalled_reason(self._host._patience_s)}); "
                "it may have been applied before its deadline, never after it"
            )
        return StoreBusyError(
            f"the connection failed while a write was in flight; it may or may not have been applied: {exc}"
        )

    def _write_alone(
        self, cur: Any, run: list[Pending], execute: Callable[[Any, list[Pending], float], None], deadline: float
    ) -> None:
        """The statement as its own transaction (autocommit): it begins and commits in
        one round trip, so the points before its begin and before its commit are one
        moment, before it leaves."""
        operation = _operation(run)
        hooks.point("before_begin", operation)
        hooks.point("before_commit", operation)
        execute(cur, run, deadline)
        hooks.point("after_commit", operation)

    def _write_in_transaction(
        self, cur: Any, run: list[Pending], execute: Callable[[Any, list[Pending], float], None], deadline: float
    ) -> None:
        """The same statement inside BEGIN ... COMMIT: behind PgBouncer, where the
        timeouts can only be set for the transaction (``SET LOCAL``)."""
        operation = _operation(run)
        hooks.point("before_begin", operation)
        cur.execute("BEGIN")
        try:
            if self._host._pgbouncer:
                set_local_timeouts(cur, deadline - time.monotonic())
            execute(cur, run, deadline)
            hooks.point("before_commit", operation)
            cur.execute(checked_commit_sql(self._host._server_deadline(deadline)), prepare=False)
        except BaseException:
            if not cur.connection.closed:
                try:
                    cur.execute("ROLLBACK")
                except self._host._psycopg.Error:
                    self._host._disconnect()
            raise
        hooks.point("after_commit", operation)

    def _create_run(self, cur: Any, creates: list[Pending], deadline: float) -> None:
        create_run(cur, self._host._q, creates, self._host._server_deadline(deadline), self._host._now())

    def _append_run(self, cur: Any, appends: list[Pending], deadline: float) -> None:
        host = self._host
        append_run(cur, host._q, appends, host._psycopg, host._server_deadline(deadline), host._now())


def _session(pending: Pending) -> str:
    return pending.job.session_id


def _rolled_back(psycopg: Any, exc: BaseException) -> bool:
    """A lock timeout, deadlock, serialization failure or cancelled statement: the
    server rolled it back and the connection is fine."""
    errors = psycopg.errors
    return isinstance(
        exc, (errors.SerializationFailure, errors.DeadlockDetected, errors.LockNotAvailable, errors.QueryCanceled)
    )


def fail_all(batch: list[Pending], error: TranscriptError, cause: BaseException | None) -> None:
    """Every request of ``batch`` fails with its own copy of ``error``."""
    for pending in batch:
        mine = type(error)(str(error))
        mine.__cause__ = cause
        pending.result, pending.error = None, mine


def _operation(run: list[Pending]) -> str:
    """The store operation a run of the writer's jobs is made of (they are all alike)."""
    return "create_session" if isinstance(run[0].job, CreateJob) else "append"
