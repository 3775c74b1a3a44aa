"""PostgreSQL as a `Dialect`: every transaction through `PgDatabase.run` (retries,
deadlines, read-only checks), times from the server's clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from protocol import SessionNotFoundError

from .._queries import load_queries
from ..sql import Dialect
from ._driver import PgDatabase
from ._schema import DIALECT

__all__ = ["PgDialect"]

T = TypeVar("T")


class PgDialect(Dialect):
    """Transactions on ``db``'s pool."""

    def __init__(self, db: PgDatabase) -> None:
        self.queries = load_queries(DIALECT)
        self._db = db
        self.missing_session = (db.psycopg.errors.ForeignKeyViolation,)

    def lock_session(self, cur: Any, session_id: str) -> Any:
        """The row, locked ``FOR UPDATE`` (``lock_session``): appends, retractions and
        compaction commits take the same lock, so they wait for this write."""
        row = cur.execute(self.queries["lock_session"], {"id": session_id}).fetchone()
        if row is None:
            raise SessionNotFoundError(session_id)
        return row

    def read(self, what: str, session_id: str, work: Callable[[Any], T]) -> T:
        return self._db.run(what, work, readonly=True)

    def write(self, what: str, session_id: str, work: Callable[[Any], T]) -> T:
        return self._db.run(what, work)

    def clock(self) -> None:
        """None: every statement reads ``clock_timestamp()`` (see `persistence.postgres._store`)."""
        return None
