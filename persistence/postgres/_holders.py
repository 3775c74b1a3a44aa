"""Announced holders (PostgreSQL on a direct connection): `HolderAnnouncement`.

A registry announces its holder name once: a session-level advisory lock keyed by
the schema and the name (shared: registries that share a name all hold it) on a
dedicated connection kept for the registry's life, and a row of ``holders``. The
lock ends with the database session, whatever ends it: a close, a kill -9 of the
process (the server reads EOF on its socket), a crashed host (the server's TCP
keepalives, set short on this connection), ``pg_terminate_backend``. A registry
held behind another holder's turn asks `PostgresStore.holder_alive`: a recorded
name whose lock it can take has lost its session, and its turn is sealed at once
(fenced by the turn's token, as every seal). Behind PgBouncer no session outlives a
transaction: nothing is announced, and the lease stands.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from protocol import TranscriptError

from ._driver import PgDatabase

__all__ = ["HolderAnnouncement"]

log = logging.getLogger("session_actors.postgres")

#: How often a cut announcement connection is connected again, at most.
_RETRY_S = 1.0


class HolderAnnouncement:
    """``holder``'s lock and row, on a connection of their own (no thread)."""

    def __init__(
        self, db: PgDatabase, queries: Mapping[str, str], holder: str, on_close: Callable[[HolderAnnouncement], None]
    ) -> None:
        self.holder = holder
        self._db = db
        self._q = queries
        self._on_close = on_close
        self._lock = threading.Lock()
        self._closed = False
        self._retry_at = 0.0
        self._conn: Any = self._announce()

    def _announce(self) -> Any:
        psycopg = self._db.psycopg
        try:
            conn = self._db.connect()
        except psycopg.Error as exc:
            raise TranscriptError(f"announcing holder {self.holder!r} failed: {exc}") from exc
        try:
            self._bounded(conn, self._q["holder_keepalives"])
            self._bounded(conn, self._q["lock_holder"])
            self._bounded(conn, self._q["record_holder"])  # after the lock: see holder_alive
        except BaseException as exc:
            conn.close()
            if isinstance(exc, psycopg.Error):
                raise TranscriptError(f"announcing holder {self.holder!r} failed: {exc}") from exc
            raise
        return conn

    def _bounded(self, conn: Any, sql: str) -> None:
        """Run ``sql`` on the announcement's connection within the store's patience:
        the store's watchdog cuts a connection whose server stopped answering, so
        no caller (the turn keeper, a registry's close) waits on it for ever."""
        watch = self._db.watchdog.watch(conn, time.monotonic() + self._db.patience_s)
        try:
            conn.execute(sql, {"holder": self.holder} if "%(holder)s" in sql else None)
        finally:
            self._db.watchdog.unwatch(watch)

    def keep(self) -> bool:
        with self._lock:
            if self._closed:
                return False
            conn = self._conn
            if conn is not None and not conn.closed and not self._heard_from(conn):
                return True  # quiet: the session (and the lock) stands
            if conn is not None and not conn.closed:
                try:
                    self._bounded(conn, self._q["clock"])  # a notice, or the server cut the session?
                    return True
                except self._db.psycopg.Error:
                    conn.close()
            self._conn = None
            if time.monotonic() < self._retry_at:
                return False
            self._retry_at = time.monotonic() + _RETRY_S
            try:
                self._conn = self._announce()
            except TranscriptError as exc:
                log.warning("holder %r is not announced (%s); a dead turn of it waits out its lease", self.holder, exc)
                return False
            log.warning("holder %r lost its announcement's connection: announced again", self.holder)
            return True

    @staticmethod
    def _heard_from(conn: Any) -> bool:
        """Did the server send anything on the idle connection (an error before it
        cut the session, EOF)? A zero-timeout poll of its socket: no round trip."""
        try:
            poller = select.poll()  # not select.select: no limit on the descriptor's number
            poller.register(conn.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError, AttributeError):  # closed, or no poll(): look the slow way
            return True

    def close(self) -> None:
        """Withdraw: drop the row (through the store's pool, within its patience),
        then close the connection, which ends the lock with the session (closing
        sends no query: a frozen server holds nobody up). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conn, self._conn = self._conn, None
        try:
            self._db.run("forget holder", self._forget)
        except Exception as exc:  # its row stays: once its lock is gone, probes say it is gone
            log.info("withdrawing holder %r failed: %s", self.holder, exc)
        finally:
            if conn is not None:
                conn.close()
            self._on_close(self)

    def _forget(self, cur: Any) -> None:
        cur.execute(self._q["forget_holder"], {"holder": self.holder})
