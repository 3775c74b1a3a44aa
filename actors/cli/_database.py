"""Which database a CLI command uses, and the check that it already exists.

`open_store` creates a missing SQLite file (and migrates an empty PostgreSQL schema),
so every command except ``simulate`` checks first that the database is there and holds
a session-actors schema: a typo in ``--db`` must not silently create an empty store.
Commands open it with ``migrate=False`` (only ``migrate`` and ``simulate`` change a
schema), and read-only commands with ``readonly=True``: they never take the write
lock, so they work while another process holds it.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager

from persistence import Store, open_store
from persistence.internal import latest_version, load_queries, parse_store_url, scrubbed, split_store_options
from protocol import ConfigurationError, SchemaVersionError

from ._output import Output

__all__ = ["DEFAULT_DB", "ENV_DB", "cmd_migrate", "open_existing", "require_existing", "resolve_db"]

ENV_DB = "SESSION_ACTORS_DB"
DEFAULT_DB = "./state.db"
_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgres"}
#: Named block in persistence/<dialect>/cli.sql.
_SCHEMA_QUERY = "cli_schema_present"


def resolve_db(args: argparse.Namespace) -> str:
    """``--db``, else ``$SESSION_ACTORS_DB``, else ``./state.db``."""
    return getattr(args, "db", None) or os.environ.get(ENV_DB) or DEFAULT_DB


def require_existing(url: str, *, schema: bool = True) -> None:
    """Raise `ConfigurationError` unless ``url`` names an existing database holding a
    session-actors schema (any database at all with ``schema=False``)."""
    backend, target = parse_store_url(url)
    if backend == "sqlite":
        _require_sqlite(target, schema=schema)
    else:
        _require_postgres(target, schema=schema)


def _require_sqlite(path: str, *, schema: bool) -> None:
    if not os.path.exists(path):
        raise ConfigurationError(f"database not found: {path} (only `session-actors simulate` creates one)")
    if not os.path.isfile(path):
        raise ConfigurationError(f"not a database file: {path}")
    if not schema:
        return
    try:
        with closing(sqlite3.connect(path, timeout=5)) as conn:
            row = conn.execute(load_queries("sqlite")[_SCHEMA_QUERY]).fetchone()
    except sqlite3.Error as exc:
        raise ConfigurationError(f"cannot read {path} as SQLite: {exc}") from exc
    if not row or not row[0]:
        raise ConfigurationError(f"{path} is not a session-actors database (no schema_version table)")


def _require_postgres(url: str, *, schema: bool) -> None:
    try:
        import psycopg
    except ImportError as exc:
        raise ConfigurationError("PostgreSQL needs the postgres extra: pip install 'session-actors[postgres]'") from exc
    url = split_store_options(url)[0]  # the store's own options are not libpq's
    try:
        with psycopg.connect(url, connect_timeout=10, autocommit=True, prepare_threshold=None) as conn:
            row = conn.execute(load_queries("postgres")[_SCHEMA_QUERY]).fetchone()
    except psycopg.Error as exc:  # libpq may quote the URL, password and all: masked, not chained
        raise ConfigurationError(f"cannot connect to PostgreSQL: {scrubbed(str(exc), url)}") from None
    if schema and (not row or not row[0]):
        raise ConfigurationError("the PostgreSQL database has no session-actors schema")


@contextmanager
def open_existing(args: argparse.Namespace, *, readonly: bool = False) -> Iterator[Store]:
    """Open the command's database after checking it exists (never migrating it);
    closed on exit."""
    url = resolve_db(args)
    require_existing(url)
    store = open_store(url, readonly=readonly, migrate=False)
    try:
        yield store
    finally:
        store.close()


def cmd_migrate(args: argparse.Namespace) -> int:
    """``session-actors migrate``: bring an existing database to this code's schema."""
    url = resolve_db(args)
    require_existing(url, schema=False)  # an empty database gets the whole schema
    latest = latest_version(_DIALECTS[parse_store_url(url)[0]])
    try:
        open_store(url, migrate=False).close()
        found = latest
    except SchemaVersionError as exc:
        if exc.found > exc.supported:
            raise
        found = exc.found
        open_store(url).close()  # migrates, in one transaction under the schema lock
    out = Output(args)
    document = {"schema_version": latest, "previous_version": found, "migrated": found != latest}
    if out.structured:
        out.emit(document, [document], list(document))
    elif found == latest:
        out.line(f"schema is current (version {latest}); nothing to do")
    else:
        out.line(f"migrated the schema from version {found} to {latest}")
    return 0
