"""Connection pool, transactions and error translation for the PostgreSQL backend.

The driver (``psycopg`` 3 and ``psycopg_pool``) is an optional extra, imported on
first use. Every store method runs one function inside one transaction through
`PgDatabase.run`; errors that guarantee a rollback (serialization failure,
deadlock, lock timeout, no free connection) are retried with jittered backoff
within the patience budget, then surface as `StoreBusyError`. A connection lost
before COMMIT was sent is retried too (the server rolled that transaction back);
one lost *during* COMMIT is retried only for read-only work: such a write may or
may not have happened, so it is reported rather than repeated.

Deadlines hold against a server that stops answering (`_watchdog`): a call still
waiting `GRACE_S` past its deadline has its connection cut, and every write's
COMMIT goes in one message with `call_deadline_check`, so the server refuses to
commit it once the deadline has passed on its own clock.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from protocol import (
    ConfigurationError,
    ReadOnlyStoreError,
    StorageFullError,
    StoreBusyError,
    TranscriptError,
)

from .. import _hooks as hooks
from .. import _telemetry as telemetry
from .._urls import display_url, scrubbed
from ._watchdog import GRACE_S, Watchdog

__all__ = [
    "DRIVER_LOGGER",
    "PgDatabase",
    "busy_reason",
    "checked_commit_sql",
    "import_driver",
    "past_deadline",
    "redact_url",
    "route_driver_logs",
    "set_local_timeouts",
    "set_timeouts_sql",
    "stalled_reason",
]

log = logging.getLogger("session_actors.pg_driver")

T = TypeVar("T")
EXTRA_HINT = "pip install 'session-actors[postgres]'"
_BACKOFF_FIRST_S = 0.01
_BACKOFF_MAX_S = 0.25
#: A transaction starting this much into its call's patience gets its own lock_timeout.
_LATE_S = 0.05
_SET_LOCAL_TIMEOUTS = "SELECT set_config('lock_timeout', %s, true), set_config('statement_timeout', %s, true)"


def set_local_timeouts(cur: Any, seconds: float) -> None:
    """``lock_timeout`` and ``statement_timeout`` for the current transaction only."""
    ms = f"{max(1, int(seconds * 1000))}ms"
    cur.execute(_SET_LOCAL_TIMEOUTS, (ms, ms))


def set_timeouts_sql(seconds: float) -> str:
    """``lock_timeout`` and ``statement_timeout`` of a connection: a statement waiting
    on a chain of locks (each wait is timed alone) still ends within ``seconds``."""
    ms = max(1, int(seconds * 1000))
    return f"SET lock_timeout = {ms}; SET statement_timeout = {ms}"


def import_driver() -> tuple[Any, Any]:
    """``(psycopg, psycopg_pool)``, or `ConfigurationError` naming the extra."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ConfigurationError(f"the PostgreSQL backend needs psycopg 3 and psycopg-pool: {EXTRA_HINT}") from exc
    route_driver_logs()
    return psycopg, psycopg_pool


#: Where the driver's own log records go (``session_actors.driver.psycopg.pool``, ...).
DRIVER_LOGGER = "session_actors.driver"


class _ToOurLogger(logging.Handler):
    """Re-logs a driver record under `DRIVER_LOGGER`: silent by default (the package
    logger has a NullHandler), visible wherever the application shows our logs."""

    def emit(self, record: logging.LogRecord) -> None:
        target = logging.getLogger(f"{DRIVER_LOGGER}.{record.name}")
        if target.isEnabledFor(record.levelno):
            ours = logging.makeLogRecord(record.__dict__)
            ours.name = target.name
            target.handle(ours)


def route_driver_logs() -> None:
    """Send psycopg's and psycopg_pool's log records to our logger instead of letting
    them propagate (unconfigured, Python prints warnings straight to stderr). Idempotent."""
    driver = logging.getLogger("psycopg")  # psycopg.pool is its child
    if not any(isinstance(h, _ToOurLogger) for h in driver.handlers):
        driver.addHandler(_ToOurLogger())
        driver.propagate = False


def redact_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(url)
    except Exception:  # unparsable: say nothing that could leak a secret
        return "<unparsable PostgreSQL URL>"
    host, port, db = parts.get("host", "localhost"), parts.get("port", "5432"), parts.get("dbname", "")
    return f"postgresql://{parts.get('user', '')}@{host}:{port}/{db}"


class PgDatabase:
    """A psycopg connection pool that runs functions as retried transactions."""

    def __init__(
        self,
        url: str,
        *,
        min_size: int,
        max_size: int,
        patience_s: float,
        connect_timeout_s: float,
        read_only: bool = False,
        pgbouncer: bool = False,
    ) -> None:
        self._psycopg, pool_mod = import_driver()
        self._patience_s = patience_s
        self._read_only = read_only
        self.pgbouncer = pgbouncer
        self._url = url
        self._connect_timeout_s = connect_timeout_s
        self._where = redact_url(url)
        _check_conninfo(self._psycopg, url, self._where)
        self._clock_offset = self._probe()  # a wrong URL fails now, with libpq's reason
        self.watchdog = Watchdog(f"session-actors-pg-watchdog-{id(self):x}")
        self._pool = pool_mod.ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs=self._connection_options(connect_timeout_s),
            configure=self._configure,
            timeout=patience_s,
            name=f"session-actors-pg-{id(self):x}",
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout_s)
        except Exception as exc:
            self._pool.close(timeout=1.0)
            # after a good probe (a race with max_connections, say): what the pool says, masked
            raise ConfigurationError(f"cannot connect to {self._where}: {scrubbed(str(exc), url)}") from None

    def _probe(self) -> float:
        """Connect once, not after the pool's wait; returns the server's clock offset
        (`_clock_offset_on`)."""
        try:
            with self._psycopg.connect(self._url, **self._connection_options(self._connect_timeout_s)) as conn:
                return _clock_offset_on(conn)
        except self._psycopg.Error as exc:
            raise ConfigurationError(
                f"cannot connect to {self._where}: {scrubbed(str(exc).strip(), self._url)}"
            ) from None

    def server_deadline(self, deadline: float) -> float:
        """The monotonic ``deadline``, plus half the watchdog's grace, on the server's
        clock (epoch seconds): what `call_deadline_check` compares with. A call's
        connection is cut at the full grace, so even with the clocks half a grace
        apart the server refuses before the caller hears of its failure."""
        return deadline + self._clock_offset + GRACE_S / 2

    def resync_clock(self) -> None:
        """Measure the server's clock again: a write was refused as late before its
        deadline had passed here, so the server's clock was stepped forward."""
        try:
            with self._pool.connection(timeout=self._patience_s) as conn:
                self._clock_offset = _clock_offset_on(conn)
        except Exception as exc:  # any: the next refusal tries again
            log.info("measuring the clock of %s failed: %s", self._where, exc)
            return
        log.warning("the clock of %s was stepped; deadlines follow it again", self._where)

    def _connection_options(self, connect_timeout_s: float) -> dict[str, Any]:
        from psycopg.rows import dict_row

        # autocommit: every transaction is an explicit block (BEGIN ... checked COMMIT).
        options: dict[str, Any] = {
            "autocommit": True,
            "row_factory": dict_row,
            "connect_timeout": max(1, int(connect_timeout_s)),
        }
        if self.pgbouncer:  # a prepared statement lives on one server connection only
            options["prepare_threshold"] = None
        return options

    def _configure(self, conn: Any) -> None:
        """Per new connection: a lock wait longer than the patience budget becomes
        LockNotAvailable, which `run` turns into StoreBusyError, never a hang. A
        read-only store's transactions all start ``BEGIN READ ONLY`` (a client-side
        setting: nothing is SET on the server session)."""
        conn.read_only = self._read_only
        if not self.pgbouncer:  # behind PgBouncer a session SET would leak to other clients
            conn.execute(set_timeouts_sql(self._patience_s))

    def _bound_lock_waits(self, cur: Any, deadline: float) -> None:
        """A transaction that starts late (a retry, a wait for a connection) may wait
        for a lock only until the call's deadline: ``lock_timeout`` for this
        transaction alone (``SET LOCAL``), so the whole call stays within patience."""
        remaining = deadline - time.monotonic()
        if self.pgbouncer or remaining < self._patience_s - _LATE_S:
            set_local_timeouts(cur, remaining)

    def _session_timeouts_fit(self, deadline: float) -> bool:
        """Whether the connection's own timeouts (``patience_s``, set when it was
        opened) end a statement within ``deadline``. Then a read needs no
        transaction block: under READ COMMITTED each statement of a block takes its
        own snapshot anyway, so BEGIN and COMMIT would only cost two round trips.
        Behind PgBouncer the timeouts exist per transaction only."""
        return not self.pgbouncer and deadline - time.monotonic() >= self._patience_s - _LATE_S

    def check_writable(self, what: str) -> None:
        """`ReadOnlyStoreError` for the write ``what`` on a read-only store."""
        if self._read_only:
            raise ReadOnlyStoreError(what, f"{what}: the store for {self._where} was opened read-only")

    def connect(self) -> Any:
        """A dedicated connection outside the pool, set up like the pool's (the
        group-commit writer keeps one for itself)."""
        conn = self._psycopg.connect(self._url, **self._connection_options(self._connect_timeout_s))
        try:
            self._configure(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    @property
    def psycopg(self) -> Any:
        return self._psycopg

    @property
    def patience_s(self) -> float:
        """How long a call may take before it fails (`StoreBusyError`)."""
        return self._patience_s

    @property
    def where(self) -> str:
        """The server, without credentials."""
        return self._where

    def close(self) -> None:
        """Close every connection and join the pool's and the watchdog's threads. Idempotent."""
        if not self._pool.closed:
            self._pool.close(timeout=5.0)
        self.watchdog.close()

    def run(self, what: str, work: Callable[[Any], T], *, readonly: bool = False, durable: bool = True) -> T:
        """Run ``work(cursor)`` in one transaction and return its result.

        A `TranscriptError` raised by ``work`` rolls back and propagates as is.
        Every write is an explicit BEGIN ... COMMIT, even a one-statement write: a
        connection found dead at BEGIN is then known to have written nothing and
        the call is retried, where a bare autocommit statement would leave it
        unknown whether the write happened. ``readonly`` work runs its statements
        without a block when the connection's timeouts fit the call's deadline
        (`_session_timeouts_fit`): a read is always safe to repeat. A write that is not
        ``durable`` commits with ``synchronous_commit`` off for its transaction alone
        (`Dialect.write`).
        """
        if self._pool.closed:
            raise TranscriptError(f"{what}: the store for {self._where} is closed")
        if not readonly:
            self.check_writable(what)
        errors = self._psycopg.errors
        rolled_back = (
            errors.SerializationFailure,
            errors.DeadlockDetected,
            errors.LockNotAvailable,
            errors.QueryCanceled,  # statement_timeout: the call's deadline, usually a lock chain
        )
        deadline = time.monotonic() + self._patience_s
        backoff = _BACKOFF_FIRST_S
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._once(work, deadline, None if readonly else what, durable)
            except TranscriptError:
                raise
            except errors.DiskFull as exc:  # an OperationalError, but nothing to retry
                raise StorageFullError(
                    f"{what}: the disk of {self._where} is full; nothing was written: {exc}"
                ) from exc
            except rolled_back as exc:
                if past_deadline(exc) and time.monotonic() < deadline:
                    self.resync_clock()
                cause: Exception = exc
            except _CommitUnknown as unknown:
                lost = cast(Exception, unknown.__cause__)
                if not readonly:
                    raise StoreBusyError(
                        f"{what}: connection to {self._where} failed during COMMIT;"
                        f" the write may or may not have been applied: {lost}"
                    ) from lost
                cause = lost
            except _Stalled as stalled:
                if stalled.committing:
                    raise StoreBusyError(
                        f"{what}: {self._where} stopped answering during COMMIT ({stalled_reason(self._patience_s)});"
                        " the write may have been applied before its deadline, never after it"
                    ) from stalled.__cause__
                cause = stalled
            except self._psycopg.OperationalError as exc:
                # Lost before COMMIT was sent (or no connection obtained at all,
                # PoolTimeout): the server rolled the transaction back, so even a
                # write is safe to repeat.
                if self._pool.closed:
                    raise TranscriptError(f"{what}: the store for {self._where} was closed") from exc
                cause = exc
            except self._psycopg.Error as exc:
                raise TranscriptError(f"{what} failed on {self._where}: {exc}") from exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StoreBusyError(
                    f"{what}: {self._where} stayed busy for {self._patience_s:g}s "
                    f"(patience_s, {attempt} attempts): {busy_reason(self._psycopg, cause)}"
                ) from cause
            log.debug("%s: retrying after %s (attempt %d)", what, type(cause).__name__, attempt)
            telemetry.busy_retry()
            time.sleep(min(remaining, backoff * random.uniform(0.5, 1.5)))
            backoff = min(backoff * 2, _BACKOFF_MAX_S)

    def _once(self, work: Callable[[Any], T], deadline: float, write: str | None, durable: bool = True) -> T:
        """One transaction (for a read whose deadline allows, its bare statements),
        its connection watched until ``deadline``; ``write`` names the store method
        of a write (kill points)."""
        timeout = max(0.001, deadline - time.monotonic())
        with self._pool.connection(timeout=timeout) as conn:
            watch = self.watchdog.watch(conn, deadline)
            committing: list[bool] = []
            try:
                return self._watched(conn, work, deadline, write, committing, durable)
            except self._psycopg.OperationalError as exc:
                if watch.cut:
                    raise _Stalled(bool(committing)) from exc
                if committing and not isinstance(exc, self._psycopg.errors.QueryCanceled):
                    raise _CommitUnknown() from exc  # (cancelled: the server answered, rolled back)
                raise
            finally:
                self.watchdog.unwatch(watch)

    def _watched(
        self,
        conn: Any,
        work: Callable[[Any], T],
        deadline: float,
        write: str | None,
        committing: list[bool],
        durable: bool = True,
    ) -> T:
        """`_once`'s transaction; ``committing`` gets an entry once COMMIT is sent."""
        if write is None:
            with conn.cursor() as cur:
                if self._session_timeouts_fit(deadline):  # a read: each statement on its own
                    return work(cur)
                with conn.transaction():
                    self._bound_lock_waits(cur, deadline)
                    return work(cur)
        hooks.point("before_begin", write)
        with conn.cursor() as cur:
            if durable:
                cur.execute("BEGIN")
            else:  # SET LOCAL: this transaction's COMMIT alone skips the WAL flush (pooler-safe)
                cur.execute("BEGIN; SET LOCAL synchronous_commit = off", prepare=False)
            try:
                self._bound_lock_waits(cur, deadline)
                result = work(cur)
                hooks.point("before_commit", write)
                committing.append(True)
                cur.execute(checked_commit_sql(self.server_deadline(deadline)), prepare=False)
            except BaseException:
                if not conn.broken and conn.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE:
                    cur.execute("ROLLBACK")  # failed work, or a COMMIT refused past its deadline
                raise
        hooks.point("after_commit", write)
        return result


def checked_commit_sql(until: float) -> str:
    """COMMIT behind `call_deadline_check` of ``until`` (the server's clock), in one
    message: a frozen backend that resumes late reads both, and refuses."""
    return f"SELECT call_deadline_check({float(until)!r}); COMMIT"


def stalled_reason(patience_s: float) -> str:
    """Why a call's connection was cut, for `StoreBusyError`."""
    return (
        f"no reply within patience_s ({patience_s:g}s) plus {GRACE_S:g}s, so its connection was cut;"
        " the server may be frozen or overloaded"
    )


def busy_reason(psycopg: Any, exc: BaseException) -> str:
    """What kept a call waiting, for `StoreBusyError`: which lock, the pool, or a
    server that stopped answering."""
    if isinstance(exc, _Stalled):
        return "the server stopped answering: its connection was cut after no reply past the call's deadline"
    errors = psycopg.errors
    if isinstance(exc, errors.QueryCanceled) and past_deadline(exc):
        return f"the server ran the write only after its deadline, and refused it: {exc}"
    if isinstance(exc, (errors.LockNotAvailable, errors.QueryCanceled)):
        where = getattr(getattr(exc, "diag", None), "context", None) or ""
        return (
            "a lock held by another transaction (lock_timeout/statement_timeout)"
            + (f", {where.strip().splitlines()[0]}" if where else "")
            + f": {exc}"
        )
    if isinstance(exc, (errors.SerializationFailure, errors.DeadlockDetected)):
        return f"conflicts with concurrent transactions: {exc}"
    if type(exc).__name__ == "PoolTimeout":
        return f"no free connection in the pool: {exc}"
    return str(exc)


def past_deadline(exc: BaseException) -> bool:
    """Whether ``exc`` is `call_deadline_check` refusing a late write."""
    return "call_deadline_check" in (getattr(getattr(exc, "diag", None), "context", None) or "")


def _check_conninfo(psycopg: Any, url: str, where: str) -> None:
    """Refuse a malformed URL at once (libpq's parser), not after a connect timeout."""
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        unknown = re.search(r'invalid URI query parameter: "([^"]*)"', str(exc))
        if unknown:  # neither ours (removed before) nor libpq's
            raise ConfigurationError(
                f"unknown URL option {unknown.group(1)!r} in {where}: neither session-actors "
                "(pgbouncer) nor libpq knows it"
            ) from exc
        # libpq quotes the URI, password included: masked, and not chained either
        raise ConfigurationError(f"invalid PostgreSQL URL {display_url(url)}: {scrubbed(str(exc), url)}") from None


class _CommitUnknown(Exception):
    """The connection failed while COMMIT was in flight: applied or not, unknown."""


class _Stalled(Exception):
    """The watchdog cut the connection of a call still waiting past its deadline."""

    def __init__(self, committing: bool) -> None:
        super().__init__("the watchdog cut a stalled connection")
        self.committing = committing


def _clock_offset_on(conn: Any) -> float:
    """How far the server's clock (epoch seconds) is ahead of our monotonic clock,
    within half a round trip. Monotonic, so a step of this machine's wall clock
    moves no deadline."""
    before = time.monotonic()
    row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::double precision AS t").fetchone()
    return float(row["t"]) - (before + time.monotonic()) / 2
