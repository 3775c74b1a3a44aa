"""The SQLite backend: the default `Store`, one local database file.

WAL mode, ``BEGIN IMMEDIATE`` for every write, busy retries with jitter up to
a patience budget (then `StoreBusyError`). With ``group_commit=True`` (the
default) every write of this process goes through one writer thread and
concurrent writes share a transaction (one fsync for many appends); a failing
request is undone alone (see `persistence.sqlite._writer`). With
``group_commit=False`` each caller runs its own transaction, one at a time.
Reads use a small pool of connections. Many processes may share the file: the
SQLite write lock serializes their transactions, and every invariant (fencing,
seq assignment, at most one child) is checked inside them.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from typing import Any, TypeVar

from protocol import ConfigurationError
from protocol._checks import check_text

from .._queries import load_queries
from .._rows import check_open_flags, check_store_options
from .._store import HolderAnnouncement, SilentAnnouncement, StoreFeatures, WriteStats
from ..sql import SqlStore
from . import _sessions as sessions
from ._batch import AloneAppends, AppendJob, RememberedCounters, bulk_append
from ._checksums import damaged_rows
from ._dialect import SqliteDialect
from ._driver import (
    SYNCHRONOUS_MODES,
    BusyRetry,
    ReaderPool,
    checkpoint_after_full,
    connect,
    ensure_private_file,
    restrict_sidecars,
)
from ._schema import DIALECT, check_schema, prepare_database
from ._writer import GroupCommitWriter, ReadOnlyWriter

__all__ = ["SqliteStore", "WriteStats"]

logger = logging.getLogger("session_actors.sqlite")

T = TypeVar("T")
MAX_BATCH = 256
MAX_IDLE_READERS = 8


class SqliteStore(SqlStore):
    """A `Store` on one SQLite file (see the module docstring).

    Options: ``synchronous`` (``"FULL"`` by default: durable on return),
    ``patience_s`` (how long a write waits for the lock before
    `StoreBusyError`), ``group_commit``, ``clock`` (epoch seconds; tests move
    time instead of sleeping), ``max_content_bytes`` (per message, default the
    protocol's limit), ``create`` (False: a missing file is a `ConfigurationError`),
    ``readonly`` (never takes the write lock, never writes: every write method
    raises `ReadOnlyStoreError`; reads work while another connection holds
    ``BEGIN IMMEDIATE``), ``migrate`` (False: never changes the schema; an older
    one raises `SchemaVersionError`). Neither ``readonly`` nor ``migrate=False``
    creates a missing file.
    """

    features = StoreFeatures(submits=True, checks_pages=True, checksums_rows=True, local_clock=True)

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "FULL",
        patience_s: float = 30.0,
        group_commit: bool = True,
        clock: Callable[[], float] | None = None,
        max_content_bytes: int | None = None,
        create: bool = True,
        readonly: bool = False,
        migrate: bool = True,
    ) -> None:
        self._check_options(synchronous, patience_s, max_content_bytes)
        check_open_flags(readonly=readonly, migrate=migrate, create=create, group_commit=group_commit)
        self.path = str(path)
        self._synchronous = synchronous.upper()
        self._clock = clock or time.time
        self._max_content_bytes = max_content_bytes
        self._retry = BusyRetry(patience_s)
        self._q = load_queries(DIALECT)
        ensure_private_file(self.path, create=create and migrate and not readonly)
        if readonly:
            self._open_readonly()
        else:
            self._open_writable(patience_s, group_commit, migrate)

    def _open_writable(self, patience_s: float, group_commit: bool, migrate: bool) -> None:
        writer_conn = connect(self.path, synchronous=self._synchronous)
        try:
            prepare_database(writer_conn, self._q, path=self.path, retry=self._retry, clock=self.now, migrate=migrate)
        except BaseException:
            writer_conn.close()
            raise
        restrict_sidecars(self.path)
        self._readers = ReaderPool(self.path, synchronous=self._synchronous, max_idle=MAX_IDLE_READERS)
        # The writer's: only its thread appends in bulk (and runs `_append_one`, but for a
        # store without group commit, whose callers take turns and never append in bulk)
        self._remembered = remembered = RememberedCounters()
        self._writer: GroupCommitWriter | ReadOnlyWriter = GroupCommitWriter(
            writer_conn,
            patience_s=patience_s,
            max_batch=MAX_BATCH,
            name=f"sqlite-writer:{self.path}",
            bulk=lambda conn, jobs: bulk_append(conn, self._q, jobs, self.now, remembered),
            one=self._append_one,
            alone=AloneAppends(self._q, self.now, remembered),
            group_commit=group_commit,
            path=self.path,
            on_full=lambda: checkpoint_after_full(writer_conn, self.path),
        )
        self._writer_conn: sqlite3.Connection | None = writer_conn
        SqlStore.__init__(
            self,
            SqliteDialect(self._readers, self._writer, self._retry, self._clock),
            max_content_bytes=self._max_content_bytes,
        )

    def _open_readonly(self) -> None:
        """Read connections only (``mode=ro``, ``query_only``); the schema must be current."""
        self._readers = ReaderPool(self.path, synchronous=self._synchronous, max_idle=MAX_IDLE_READERS, readonly=True)
        conn = self._readers.checkout()
        try:
            check_schema(conn, self._q, retry=self._retry, migrate=False)
        except sqlite3.Error as exc:
            self._readers.close()
            raise ConfigurationError(f"cannot open SQLite database {self.path!r}: {exc}") from exc
        except BaseException:
            self._readers.close()
            raise
        finally:
            self._readers.checkin(conn)
        self._writer = ReadOnlyWriter(self.path)
        self._writer_conn = None
        SqlStore.__init__(
            self,
            SqliteDialect(self._readers, self._writer, self._retry, self._clock),
            max_content_bytes=self._max_content_bytes,
        )

    @staticmethod
    def _check_options(synchronous: object, patience: object, max_bytes: object) -> None:
        if not isinstance(synchronous, str) or synchronous.upper() not in SYNCHRONOUS_MODES:
            raise ConfigurationError(f"synchronous must be one of {SYNCHRONOUS_MODES}, got {synchronous!r}")
        check_store_options(patience_s=patience, max_content_bytes=max_bytes)

    # -- plumbing ---------------------------------------------------------------

    def _read(self, fn: Callable[[sqlite3.Connection], T], session_id: str = "?") -> T:
        """Run ``fn`` in one read transaction (a consistent snapshot)."""
        return self._dialect.read("read", session_id, fn)

    def _physical_check(self) -> list[str]:
        """What SQLite's ``integrity_check`` finds wrong with the file's pages and
        indexes (at most 20 findings; they name pages and rows, never their content);
        empty when the file is sound. For fsck."""
        rows = self._read(lambda c: c.execute("PRAGMA integrity_check(20)").fetchall())
        findings = [str(r[0]) for r in rows]
        return [] if findings == ["ok"] else findings

    def _damaged_rows(self) -> list[tuple[str, int]]:
        """(session id, seq) of the rows whose bytes no longer match their checksum. For fsck."""
        return self._read(lambda c: list(damaged_rows(c, self._q)))

    def write_stats(self) -> WriteStats:
        """Write transactions committed by this store object, the requests they held
        (group commit puts many in one), and requests queued for the writer."""
        return self._writer.stats()

    def now(self) -> float:
        return float(self._clock())

    # -- holders (`HolderAwareStore`: nothing to tell) ----------------------------

    def announce_holder(self, holder: str) -> HolderAnnouncement:
        """Nothing is announced: every process is on this host, where a registry reads
        /proc (`actors._liveness`); ``knows_holders`` is False."""
        check_text(holder, "holder")
        return SilentAnnouncement()

    def holder_alive(self, holder: str) -> bool | None:
        """None: this store cannot tell (see `announce_holder`)."""
        check_text(holder, "holder")
        return None

    def close(self) -> None:
        if not self._readers.close():
            return
        self._writer.close()  # runs what is queued, then stops its thread
        if self._writer_conn is None:  # read-only
            return
        try:
            self._writer_conn.close()
        except sqlite3.Error as exc:  # closing must not raise; note it
            logger.warning("closing the writer connection failed: %s", exc)

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"

    # -- the writer's job ---------------------------------------------------------

    def _append_one(self, c: sqlite3.Connection, job: AppendJob) -> Any:
        """One append job alone, in the writer's transaction (the writer's ``one``: no
        closure per append, fewer objects for the garbage collector, see `_Request`);
        a keyed one was submitted (`SqlStore.append_nowait`)."""
        if job.keyed:
            return self._dialect.keyed_append(c, job)
        now = self.now()
        first_seq, ids = sessions.append_rows(c, self._q, job.session_id, job.params, now, job.incarnation, job.turn)
        self._remembered.note({job.session_id: first_seq + len(ids)})  # a bulk batch may skip reading it
        return first_seq, ids, now
