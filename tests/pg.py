"""PostgreSQL test plumbing: one throwaway schema per test.

``SESSION_ACTORS_PG_URL`` names the server (default: the local trust-auth one);
``SESSION_ACTORS_REQUIRE_PG=1`` (set by ``.ci/run``) turns "server unavailable"
from a skip into a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import pytest

PG_URL = os.environ.get("SESSION_ACTORS_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
#: A PgBouncer in transaction mode in front of the same server (any database name;
#: `.ci/run` starts one), without a database name (a trailing slash is ignored).
PGBOUNCER_URL = os.environ.get("SESSION_ACTORS_PGBOUNCER_URL", "postgresql://postgres@127.0.0.1:6432").rstrip("/")
REQUIRE_PG = os.environ.get("SESSION_ACTORS_REQUIRE_PG") == "1"


def _unavailable(reason: str) -> None:
    if REQUIRE_PG:
        pytest.fail(f"PostgreSQL required (SESSION_ACTORS_REQUIRE_PG=1) but {reason}")
    pytest.skip(f"PostgreSQL unavailable: {reason}")


def _admin_connect():
    try:
        import psycopg
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    try:
        return psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except Exception as exc:  # any connection failure means "no server here"
        _unavailable(f"cannot connect to {PG_URL}: {exc}")


@contextmanager
def isolated_postgres_url() -> Iterator[str]:
    """Yield a URL whose connections use a fresh, empty schema; drop it afterwards."""
    schema = f"sa_test_{uuid.uuid4().hex[:12]}"
    with _admin_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in PG_URL else "?"
    url = f"{PG_URL}{sep}options={quote(f'-c search_path={schema}')}"
    try:
        yield url
    finally:
        with _admin_connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def pg_rows(url: str, sql: str, params: tuple | dict | None = None) -> list[tuple]:
    """Run one statement on its own autocommit connection; the rows it returns."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        cur = conn.execute(sql, params)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


def with_application_name(url: str, name: str) -> str:
    """``url`` tagged with ``application_name``, to find its backends in pg_stat_activity."""
    return f"{url}&application_name={quote(name)}" if "?" in url else f"{url}?application_name={quote(name)}"


def table_snapshot(url: str) -> dict[str, list[tuple]]:
    """Every row of every store table, sorted: equal snapshots mean nothing was written."""
    tables = ("sessions", "messages", "leases", "cooldowns", "compactions", "schema_version")
    return {t: sorted(pg_rows(url, f"SELECT * FROM {t}"), key=repr) for t in tables}


@contextmanager
def pgbouncer_database() -> Iterator[str]:
    """A throwaway database (created on the server directly) reachable through PgBouncer;
    yields its name, drops it afterwards (closing PgBouncer's server connections to it)."""
    import psycopg

    name = f"sa_bouncer_{uuid.uuid4().hex[:12]}"
    with _admin_connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    try:
        try:
            psycopg.connect(f"{PGBOUNCER_URL}/{name}", connect_timeout=5, prepare_threshold=None).close()
        except Exception as exc:  # any failure means "no PgBouncer here"
            _unavailable(f"no PgBouncer at {PGBOUNCER_URL} (SESSION_ACTORS_PGBOUNCER_URL): {exc}")
        yield name
    finally:
        with _admin_connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pgbouncer_store_url(database: str) -> str:
    """A store URL through PgBouncer to ``database``, emptied first (its public schema)."""
    import psycopg

    direct = PG_URL.rsplit("/", 1)[0] + f"/{database}"
    with psycopg.connect(direct, autocommit=True, connect_timeout=5) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")
    return f"{PGBOUNCER_URL}/{database}?pgbouncer=true"
