"""The SQLite backend (the default): one local database file, WAL, group commit."""

from ._store import SqliteStore

__all__ = ["SqliteStore"]
