"""Where each schedule's database comes from: a copy of a SQLite template file, or a
fresh PostgreSQL schema.

Both start every schedule from the same state: the session and its prefill. SQLite
copies a template written once; PostgreSQL creates a schema per schedule and
prefills it. On both the store's clock is the harness's (`harness_clock`), so
leases, turns and cooldowns expire by schedule, not by the machine's time.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from persistence import Store
from persistence.internal import parse_store_url
from persistence.sqlite import SqliteStore
from protocol import InvalidArgumentError, Message

__all__ = ["Databases", "PostgresSchemas", "SqliteFiles", "databases_for"]

#: The store's wall clock at the start of every schedule (epoch seconds).
EPOCH = 1_800_000_000.0
#: What each reading of that clock adds: no two stamps of a schedule are equal.
TICK_S = 1e-6

Prefill = Callable[[Store], None]


def harness_clock(offset: Callable[[], float]) -> Callable[[], float]:
    """The store's clock of one schedule: `EPOCH` plus ``offset()`` (the virtual
    seconds elapsed), plus a tick for each reading: that orders every stamp of a
    schedule (the history checks read them)."""
    ticks = itertools.count()
    return lambda: EPOCH + offset() + next(ticks) * TICK_S


class Databases:
    """One backend's fresh databases (``ref``: a file path or a URL)."""

    def fresh(self, key: str, prefill: Prefill) -> str:
        """A new database holding what ``prefill`` writes (the same for one ``key``)."""
        raise NotImplementedError

    def open(self, ref: str, offset: Callable[[], float]) -> Store:
        raise NotImplementedError

    def turn_tokens(self, ref: str) -> dict[int, str]:
        """Row id -> the token of the turn it was appended in (rows in a turn only)."""
        raise NotImplementedError

    def archived_at(self, ref: str) -> dict[int, float]:
        """Row id -> when it left the live transcript (archived rows only)."""
        raise NotImplementedError

    def remove(self, ref: str) -> None:
        raise NotImplementedError


class SqliteFiles(Databases):
    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._templates: dict[str, Path] = {}
        self._count = 0

    def fresh(self, key: str, prefill: Prefill) -> str:
        template = self._templates.get(key)
        if template is None:
            template = self._folder / f"template-{len(self._templates) + 1}.db"
            store = SqliteStore(str(template), clock=lambda: EPOCH)
            try:
                prefill(store)
            finally:
                store.close()
            self._templates[key] = template
        self._count += 1
        db = self._folder / f"schedule-{self._count}.db"
        os.close(os.open(db, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600))  # transcripts are private
        with sqlite3.connect(template) as src, sqlite3.connect(db) as dst:
            src.backup(dst)
        src.close()
        dst.close()
        return str(db)

    def open(self, ref: str, offset: Callable[[], float]) -> Store:
        return SqliteStore(ref, clock=harness_clock(offset), group_commit=False)

    def turn_tokens(self, ref: str) -> dict[int, str]:
        rows = self._rows(ref, "SELECT id, turn FROM messages WHERE turn IS NOT NULL")
        return {row_id: str(token) for row_id, token in rows}

    def archived_at(self, ref: str) -> dict[int, float]:
        rows = self._rows(ref, "SELECT id, archived_at FROM messages WHERE archived_at IS NOT NULL")
        return {row_id: float(when) for row_id, when in rows}

    @staticmethod
    def _rows(ref: str, sql: str) -> list[Any]:
        with sqlite3.connect(f"file:{ref}?mode=ro", uri=True) as conn:
            rows = conn.execute(sql).fetchall()
        conn.close()
        return rows

    def remove(self, ref: str) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{ref}{suffix}").unlink(missing_ok=True)


class PostgresSchemas(Databases):
    def __init__(self, url: str) -> None:
        self._url = url
        self._schemas: dict[str, str] = {}  # ref -> its schema

    def fresh(self, key: str, prefill: Prefill) -> str:
        schema = f"harness_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE SCHEMA "{schema}"')
        sep = "&" if "?" in self._url else "?"
        ref = f"{self._url}{sep}options={quote(f'-c search_path={schema}')}"
        store = self.open(ref, lambda: 0.0)
        try:
            prefill(store)
        finally:
            store.close()
        self._schemas[ref] = schema
        return ref

    def open(self, ref: str, offset: Callable[[], float]) -> Store:
        from persistence.postgres import PostgresStore  # the postgres extra, when asked for

        return PostgresStore(ref, min_size=1, max_size=2, clock=harness_clock(offset))

    def turn_tokens(self, ref: str) -> dict[int, str]:
        rows = self._rows(ref, "SELECT id, turn FROM messages WHERE turn IS NOT NULL")
        return {int(row_id): str(token) for row_id, token in rows}

    def archived_at(self, ref: str) -> dict[int, float]:
        rows = self._rows(ref, "SELECT id, archived_at FROM messages WHERE archived_at IS NOT NULL")
        return {int(row_id): float(when) for row_id, when in rows}

    def remove(self, ref: str) -> None:
        self._admin(f'DROP SCHEMA IF EXISTS "{self._schemas.pop(ref)}" CASCADE')

    def _admin(self, sql: str) -> None:
        self._rows(self._url, sql)

    @staticmethod
    def _rows(url: str, sql: str) -> Sequence[Any]:
        import psycopg

        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []


def databases_for(store: str | Path | None) -> tuple[Databases, Path | None]:
    """``store``: None (SQLite files in a new temporary directory, returned second so its
    owner removes it), a directory (SQLite files), or a PostgreSQL URL."""
    if store is None:
        folder = Path(tempfile.mkdtemp(prefix="session-harness-"))
        return SqliteFiles(folder), folder
    backend, target = parse_store_url(store)
    if backend == "postgresql":
        return PostgresSchemas(target), None
    if not Path(target).is_dir():
        raise InvalidArgumentError(f"store must be None, an existing directory or a PostgreSQL URL, got {store!r}")
    return SqliteFiles(Path(target)), None


def prefill_with(messages: Sequence[Message], session_id: str, make_registry: Callable[[Store], Any]) -> Prefill:
    """Create ``session_id`` holding ``messages`` (through a registry, as a gateway would)."""

    def prefill(store: Store) -> None:
        registry = make_registry(store)
        try:
            handle = registry.session(session_id)
            if messages:
                handle.append(list(messages))
            else:
                handle.transcript()
        finally:
            registry.close()

    return prefill
