"""The SQLite backend (the default): one local database file, WAL, group commit."""

from .store import SqliteStore

__all__ = ["SqliteStore"]
