"""PostgreSQL as a `Dialect`: every transaction through `PgDatabase.run` (retries,
deadlines, read-only checks), times from the server's clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

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

    def read(self, what: str, session_id: str, work: Callable[[Any], T]) -> T:
        return self._db.run(what, work, readonly=True)

    def write(self, what: str, session_id: str, work: Callable[[Any], T]) -> T:
        return self._db.run(what, work)

    def clock(self) -> None:
        """None: every statement reads ``clock_timestamp()`` (see `persistence.postgres._store`)."""
        return None
