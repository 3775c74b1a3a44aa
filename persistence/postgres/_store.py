"""The PostgreSQL backend: `PostgresStore`, opened by ``open_store("postgresql://...")``.

A dumb connector running the named queries of ``persistence/postgres``; the
database enforces the invariants (fencing inside the UPDATE of the lease row,
``UNIQUE(session_id, seq)``, the session row lock that orders seqs by commit).

**Clock.** Every time is ``extract(epoch FROM clock_timestamp())`` evaluated by the
server: the database's wall clock at the moment the statement checks it. Lease
expiry never looks at a client clock, so clients with skewed clocks agree.
``now()`` was rejected because it is frozen at transaction start and would judge
a lease by a stale time after a lock wait. A store given ``clock`` (the testing
harness's virtual clock) passes its reading as ``now`` to every statement that
stamps or compares with the time instead; a write's deadline
(`call_deadline_check`) stays on the server's clock, as it is about real time:
a backend frozen past it must refuse whatever the test's clock says.

Leases are rows (``leases``), never advisory locks: an advisory lock carries no
token and breaks behind transaction poolers. The advisory locks are the
per-schema one taken while migrating (see `persistence.postgres._schema`) and a
registry's holder lock, a liveness hint only (see `persistence.postgres._holders`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from protocol import ConfigurationError
from protocol._checks import check_text

from .._queries import load_queries
from .._rows import check_open_flags
from .._store import HolderAnnouncement as Announcement
from .._store import SilentAnnouncement, StoreFeatures, WriteStats
from ..sql import SqlStore
from ._args import check_pool_options
from ._dialect import PgDialect
from ._driver import PgDatabase
from ._holders import HolderAnnouncement
from ._notify import CompactionListener, TurnListener
from ._schema import DIALECT, ensure_schema
from ._writer import PgWriter

__all__ = ["PostgresStore"]


class PostgresStore(SqlStore):
    """The `Store` on PostgreSQL, through a ``psycopg_pool.ConnectionPool``.

    Options: ``min_size``/``max_size`` (pool), ``patience_s`` (how long a call
    retries a busy database — serialization failures, deadlocks, lock waits, no
    free connection — before `StoreBusyError`; also the server-side
    ``lock_timeout``), ``connect_timeout_s``, ``max_content_bytes`` (per message,
    default: the process-wide limit), ``readonly`` (every transaction is
    ``READ ONLY``; every write method raises `ReadOnlyStoreError`), ``migrate``
    (False: never changes the schema; an older one raises `SchemaVersionError`),
    ``pgbouncer`` (behind PgBouncer in transaction mode: no automatic prepared
    statements, no session-level ``SET`` — timeouts are set per transaction — and
    no LISTEN hint; also ``?pgbouncer=true`` in the URL), ``clock`` (epoch seconds:
    leases, turns, cooldowns and stamps follow it instead of the server's clock;
    for tests that move time, as `SqliteStore`'s; None: the server's).
    """

    features = StoreFeatures(submits=True, announces_turns=True, checksums_rows=True, knows_holders=True)

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        patience_s: float = 10.0,
        connect_timeout_s: float = 5.0,
        max_content_bytes: int | None = None,
        readonly: bool = False,
        migrate: bool = True,
        pgbouncer: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> None:
        check_pool_options(min_size, max_size, patience_s, connect_timeout_s, max_content_bytes)
        check_open_flags(readonly=readonly, migrate=migrate, pgbouncer=pgbouncer)
        if clock is not None and not callable(clock):
            raise ConfigurationError(f"clock must be a function of no arguments or None, got {clock!r}")
        self._readonly = readonly
        self._clock = clock
        self._max_content_bytes = max_content_bytes
        self._url = url
        self._connect_timeout_s = float(connect_timeout_s)
        self._q = load_queries(DIALECT)
        self._db = PgDatabase(
            url,
            min_size=min_size,
            max_size=max_size,
            patience_s=float(patience_s),
            connect_timeout_s=float(connect_timeout_s),
            read_only=readonly,
            pgbouncer=pgbouncer,
        )
        try:
            self.schema_version = ensure_schema(self._db, self._q, migrate=migrate and not readonly)
        except BaseException:
            self._db.close()
            raise
        self._writer = PgWriter(
            self._db.connect,
            self._q,
            psycopg=self._db.psycopg,
            patience_s=float(patience_s),
            name=f"pg-writer-{id(self):x}",
            pgbouncer=pgbouncer,
            watchdog=self._db.watchdog,
            server_deadline=self._db.server_deadline,
            resync_clock=self._db.resync_clock,
            clock=clock,
        )
        SqlStore.__init__(self, PgDialect(self._db, self._writer, clock), max_content_bytes=max_content_bytes)
        self._announced: set[HolderAnnouncement] = set()  # closed with the store
        self._announced_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PostgresStore({self._db.where})"

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ---------------------------------------------------------------

    def _read(self, what: str, work: Any) -> Any:
        return self._dialect.read(what, "?", work)

    def write_stats(self) -> WriteStats:
        """Group-commit counters: committed transactions and the requests they held."""
        return self._writer.stats()

    def _damaged_rows(self) -> list[tuple[str, int]]:
        """(session id, seq) of the rows whose text no longer matches their checksum. For fsck."""

        def work(cur: Any) -> list[tuple[str, int]]:
            cur.execute(self._q["damaged_rows"])
            return [(r["session_id"], r["seq"]) for r in cur.fetchall()]

        return self._read("fsck", work)

    # -- notifications (PostgreSQL only) --------------------------------------

    def listen_compactions(self) -> CompactionListener:
        """A `CompactionListener` on a dedicated connection: hints of compactions
        committed from now on (by any process on this schema). Close it when done.

        Raises: `ConfigurationError` behind PgBouncer (``pgbouncer=True``): LISTEN needs
        a session of its own, which transaction pooling does not give.
        """
        if self._db.pgbouncer:
            raise ConfigurationError(
                "the LISTEN/NOTIFY hint is off behind PgBouncer (pgbouncer=true); the store is correct without it"
            )
        return CompactionListener(self._url, self._q, connect_timeout_s=self._connect_timeout_s)

    def listen_turns(self) -> TurnListener:
        """A `TurnListener` on a dedicated connection: hints of turns closed from now on
        (a registry holding calls behind another process's turn wakes on them).

        Raises: `ConfigurationError` behind PgBouncer, as `listen_compactions`.
        """
        if self._db.pgbouncer:
            raise ConfigurationError(
                "the LISTEN/NOTIFY hint is off behind PgBouncer (pgbouncer=true); the store is correct without it"
            )
        return TurnListener(self._url, self._q, connect_timeout_s=self._connect_timeout_s)

    # -- holders (`HolderAwareStore`) -------------------------------------------

    def announce_holder(self, holder: str) -> Announcement:
        """`HolderAwareStore.announce_holder`: a shared session-level advisory lock
        named after ``holder`` (and this schema), held on a dedicated connection until
        the announcement (or the store) closes, and ``holder``'s row in ``holders``.
        Behind PgBouncer (no session outlives a transaction) or read-only: nothing is
        announced."""
        check_text(holder, "holder")
        if self._db.pgbouncer or self._readonly:
            return SilentAnnouncement()
        announcement = HolderAnnouncement(self._db, self._q, holder, self._forget_announcement)
        with self._announced_lock:
            self._announced.add(announcement)
        return announcement

    def _forget_announcement(self, announcement: HolderAnnouncement) -> None:
        with self._announced_lock:
            self._announced.discard(announcement)

    def holder_alive(self, holder: str) -> bool | None:
        """`HolderAwareStore.holder_alive`: whether a session holds ``holder``'s lock
        (one statement; its exclusive try-lock ends with it); None behind PgBouncer,
        or for a name never announced here (or withdrawn)."""
        check_text(holder, "holder")
        if self._db.pgbouncer:
            return None

        def work(cur: Any) -> bool | None:
            cur.execute(self._q["holder_alive"], {"holder": holder})
            alive = cur.fetchone()["alive"]
            return None if alive is None else bool(alive)

        return self._read("holder_alive", work)

    # -- lifecycle -------------------------------------------------------------

    def now(self) -> float:
        if self._clock is not None:
            return float(self._clock())

        def work(cur: Any) -> float:
            cur.execute(self._q["clock"])
            return float(cur.fetchone()["now"])

        return self._read("now", work)

    def close(self) -> None:
        with self._announced_lock:
            announced = list(self._announced)
        for announcement in announced:  # a registry left open: its holder is withdrawn
            announcement.close()
        self._writer.close()  # commits what is queued; its callers are waiting
        self._db.close()
