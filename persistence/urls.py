"""Pick a backend from a URL or a path."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from protocol import ConfigurationError

from .store import Store

__all__ = ["display_url", "open_store", "parse_store_url"]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def parse_store_url(url_or_path: str | os.PathLike[str]) -> tuple[str, str]:
    """Return ``(backend, target)``: ``("sqlite", path)`` or ``("postgresql", url)``.

    Raises: `ConfigurationError` for an empty value or an unknown scheme.
    """
    text = os.fspath(url_or_path)
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError("empty database URL or path")
    if text.startswith(_POSTGRES_SCHEMES):
        return "postgresql", text
    if text.startswith("sqlite://"):
        path = text[len("sqlite://"):]
        if path.startswith("/"):
            path = path[1:] or ""
        if not path or path == ":memory:":
            raise ConfigurationError(f"sqlite URL needs a file path: {text!r}")
        return "sqlite", path
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise ConfigurationError(
            f"unsupported database URL scheme {scheme!r}: use a path, sqlite:///path or postgresql://..."
        )
    if text == ":memory:":
        raise ConfigurationError("in-memory SQLite is not durable; give a file path")
    return "sqlite", text


def display_url(url_or_path: str | os.PathLike[str]) -> str:
    """The URL with any password masked, safe to print or log."""
    text = os.fspath(url_or_path)
    if not text.startswith(_POSTGRES_SCHEMES):
        return text
    parts = urlsplit(text)
    if parts.password is None:
        return text
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def open_store(
    url_or_path: str | os.PathLike[str], *, readonly: bool = False, migrate: bool = True,
    **options: Any,
) -> Store:
    """Open the store at ``url_or_path``; ``options`` go to the backend's constructor.

    ``readonly=True`` never takes a write lock and never writes (every write method
    raises `ReadOnlyStoreError`); reads work while another connection holds the
    write lock. ``migrate=False`` never changes the schema. Neither creates a
    missing SQLite file.

    Raises: `ConfigurationError` for a bad URL or a missing optional driver;
    `SchemaVersionError` when the database is newer than this code, or older and
    ``readonly`` or ``migrate=False`` forbids upgrading it (``session-actors migrate``).
    """
    backend, target = parse_store_url(url_or_path)
    if backend == "postgresql":
        from .postgres import PostgresStore  # lazy: psycopg is an optional extra

        return PostgresStore(target, readonly=readonly, migrate=migrate, **options)
    from .sqlite import SqliteStore

    return SqliteStore(target, readonly=readonly, migrate=migrate, **options)
