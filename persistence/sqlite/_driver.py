"""SQLite plumbing: private files, configured connections, busy retries, error mapping."""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import stat
import threading
import time
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import quote

from protocol import (
    ConfigurationError,
    InvalidArgumentError,
    InvalidMessageError,
    SessionExistsError,
    SessionNotFoundError,
    StorageFullError,
    StoreBusyError,
    TranscriptError,
)

from .. import _telemetry as telemetry

__all__ = [
    "SYNCHRONOUS_MODES",
    "WAL_AUTOCHECKPOINT_PAGES",
    "BusyRetry",
    "ReaderPool",
    "checkpoint_after_full",
    "connect",
    "ensure_private_file",
    "is_busy",
    "is_full",
    "map_sqlite_error",
    "restrict_sidecars",
    "warn_if_readable_by_others",
]

logger = logging.getLogger("session_actors.sqlite_conn")

T = TypeVar("T")
SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_FULL = 5, 6, 13
_PRIVATE = stat.S_IRUSR | stat.S_IWUSR
# Prepared statements kept per connection: every named query plus the bulk
# INSERT shapes of group commit, so the writer never re-parses its SQL.
CACHED_STATEMENTS = 256
# WAL pages after which a COMMIT copies the WAL back into the database
# (SQLite's default: 1,000). Each group commit rewrites two index pages per session
# it touches, so a busy writer reached 1,000 pages every ~15 commits, and each
# checkpoint copies and fsyncs the pages again. At 4,000 a page rewritten by many
# commits is copied once for four times as many of them: COMMIT CPU -10% with 64
# sessions, -25% with 20,000 (batches of 30 appends); the WAL file's high-water
# mark is ~16 MiB instead of ~4 MiB.
WAL_AUTOCHECKPOINT_PAGES = 4000
# Once a disk filled up, the writer keeps its WAL this small (pages), and truncates
# it back to this size after each checkpoint: the room an operator frees on a small
# disk is otherwise taken again by the WAL growing back to its ~16 MiB high-water
# mark, and the store fails again soon after recovering.
WAL_PAGES_AFTER_FULL = 64


def ensure_private_file(path: str, *, create: bool) -> None:
    """Create the database file with mode 0600 before SQLite opens it.

    SQLite creates its -wal and -shm files with the database file's permissions,
    so creating this one privately keeps all three private. An existing file that
    others may read is reported (once per file and process), not changed: it may
    be shared on purpose.
    """
    if os.path.exists(path):
        warn_if_readable_by_others(path)
        return
    if not create:
        raise ConfigurationError(f"database {path!r} does not exist")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigurationError(f"directory of database {path!r} does not exist")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, _PRIVATE)
    except FileExistsError:
        return  # another process created it first
    except OSError as exc:
        raise ConfigurationError(f"cannot create database {path!r}: {exc}") from exc
    os.close(fd)


_warned_paths: set[str] = set()
_warned_lock = threading.Lock()


def warn_if_readable_by_others(path: str) -> None:
    """A warning on the logger, once per file and process, when the database file is
    readable by its group or by everyone (transcripts are private data)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return
    if not mode & (stat.S_IRGRP | stat.S_IROTH):
        return
    key = os.path.realpath(path)
    with _warned_lock:
        if key in _warned_paths:
            return
        _warned_paths.add(key)
    logger.warning(
        "database %s is readable by others (mode %s): transcripts are private; chmod 600 it", path, oct(mode)
    )


def restrict_sidecars(path: str) -> None:
    """Make sure -wal/-shm files are not readable by others (umask or old files)."""
    for suffix in ("-wal", "-shm"):
        side = path + suffix
        try:
            mode = stat.S_IMODE(os.stat(side).st_mode)
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                os.chmod(side, _PRIVATE)
        except FileNotFoundError:
            continue
        except OSError as exc:  # not ours to fix (another user's file); say so once
            logger.warning("cannot restrict permissions of %s: %s", side, exc)


def _on_read_only_filesystem(path: str) -> bool:
    try:
        return bool(os.statvfs(os.path.dirname(os.path.abspath(path))).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (not POSIX): assume writable
        return False


def _has_wal(path: str) -> bool:
    try:
        return os.path.getsize(path + "-wal") > 0
    except OSError:
        return False


#: How long opening a connection waits for a lock (another process migrating a new file).
_SETUP_WAIT_S = 30.0
#: SQLite's own wait per try once open: short, with `BusyRetry`'s jittered retries around it.
_BUSY_WAIT_MS = 50


def connect(path: str, *, synchronous: str, readonly: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode (we issue BEGIN ourselves), WAL, foreign keys on.

    ``readonly`` opens the file ``mode=ro`` with ``query_only`` on: such a connection
    can never take the write lock nor write, so it works while another connection
    holds ``BEGIN IMMEDIATE``; on a read-only filesystem it is also ``immutable``. SQLite's own busy handler is kept short: waiting is
    done by `BusyRetry`, with jitter and a patience budget, so a caller gets
    `StoreBusyError`, never a hang.
    """
    conn = None
    target, uri = (f"file:{quote(os.path.abspath(path))}?mode=ro", True) if readonly else (path, False)
    if readonly and _on_read_only_filesystem(path) and not _has_wal(path):
        # WAL readers need the -shm file, which cannot be made here; nobody can write
        # the file either, so SQLite may read it as immutable (no locks, no -shm). Not
        # with a WAL left over: immutable would not read it (commits would go missing)
        target += "&immutable=1"
    try:
        conn = sqlite3.connect(
            target,
            isolation_level=None,
            check_same_thread=False,
            # the set-up below reads the schema: on a new file another process may be
            # migrating (no WAL yet, so it locks readers out), for longer than a retry
            timeout=_SETUP_WAIT_S,
            cached_statements=CACHED_STATEMENTS,
            uri=uri,
        )
        conn.row_factory = sqlite3.Row
        if readonly:
            conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA temp_store = MEMORY")  # savepoint journals stay off disk
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")  # see there
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_WAIT_MS}")  # from here on, BusyRetry paces the waits
    except sqlite3.Error as exc:
        if conn is not None:
            conn.close()
        raise ConfigurationError(f"cannot open SQLite database {path!r}: {exc}") from exc
    return conn


def is_busy(exc: BaseException) -> bool:
    """True for "database is locked" / "database is busy" (retryable)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    text = str(exc)
    return "database is locked" in text or "database is busy" in text


# Integrity failures by the text SQLite reports: named CHECK constraints report
# their name; UNIQUE/PRIMARY KEY failures report table.column.
_INTEGRITY_MAP: tuple[tuple[str, Callable[[str], TranscriptError]], ...] = (
    ("sessions.id", lambda sid: SessionExistsError(sid)),
    ("messages_role_valid", lambda sid: InvalidMessageError("role is not one of system/user/assistant/tool")),
    ("messages_content_json", lambda sid: InvalidMessageError("content is not valid JSON")),
    ("messages_state_valid", lambda sid: InvalidArgumentError("invalid message state")),
    ("compactions_mode_valid", lambda sid: InvalidArgumentError("invalid compaction mode")),
    ("FOREIGN KEY", lambda sid: SessionNotFoundError(sid)),
)


def is_full(exc: BaseException) -> bool:
    """True for SQLITE_FULL: the disk (or the file size limit) has no room."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == _SQLITE_FULL
    return isinstance(exc, sqlite3.OperationalError) and "database or disk is full" in str(exc)


def map_sqlite_error(exc: sqlite3.Error, session_id: str = "?") -> TranscriptError:
    """Our error for a driver error (the caller raises it ``from exc``)."""
    if is_busy(exc):
        return StoreBusyError(f"the SQLite database stayed locked by another connection: {exc}")
    if is_full(exc):
        return StorageFullError(f"the disk holding the SQLite database is full; nothing was written ({exc})")
    if isinstance(exc, sqlite3.IntegrityError):
        text = str(exc)
        for needle, make in _INTEGRITY_MAP:
            if needle in text:
                return make(session_id)
        return TranscriptError(f"integrity violation: {exc}")
    return TranscriptError(f"SQLite error: {exc}")


def checkpoint_after_full(conn: sqlite3.Connection, path: str) -> bool:
    """After a write failed for space: copy the WAL into the database and truncate it,
    so the space the WAL held is given back and the store works again as soon as
    there is room, without reopening. From then on this connection keeps its WAL
    small (`WAL_PAGES_AFTER_FULL`). False when it could not (still no room, or a
    reader in the way): the writer tries again before its next write."""
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_PAGES_AFTER_FULL}")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_PAGES_AFTER_FULL * page_size}")
        busy, wal_frames, moved = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except sqlite3.Error as exc:
        logger.info("checkpoint of %s after a full disk failed (retried before the next write): %s", path, exc)
        return False
    logger.warning(
        "disk full under %s: WAL checkpointed (%s of %s frames%s)",
        path,
        moved,
        wal_frames,
        ", a reader kept it from truncating" if busy else ", truncated",
    )
    return not busy


class BusyRetry:
    """Jittered retries of a busy operation until the patience budget is spent."""

    def __init__(self, patience_s: float) -> None:
        self.patience_s = patience_s

    def run(self, attempt: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.patience_s
        delay = 0.001
        while True:
            try:
                return attempt()
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StoreBusyError(
                        f"the SQLite database stayed locked by another connection for "
                        f"{self.patience_s:.1f}s (patience_s={self.patience_s:g}): {exc}"
                    ) from exc
                telemetry.busy_retry()
                # full jitter keeps competing processes from retrying in lockstep
                time.sleep(min(remaining, random.uniform(0, delay)))
                delay = min(delay * 2, 0.05)


class ReaderPool:
    """Read connections, reused across calls: threads come and go, connections stay."""

    def __init__(self, path: str, *, synchronous: str, max_idle: int, readonly: bool = False) -> None:
        self._path = path
        self._synchronous = synchronous
        self._readonly = readonly
        self._max_idle = max_idle
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def checkout(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise TranscriptError("the store is closed")
            if self._idle:
                return self._idle.pop()
        return connect(self._path, synchronous=self._synchronous, readonly=self._readonly)

    def checkin(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()  # closed pool, or enough idle ones

    def close(self) -> bool:
        """Close the idle connections (busy ones close on checkin). False if already closed."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        return True
