"""Shared fixtures: backends, stores, and the leak check every test runs under."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pykka
import pytest

from persistence import Store, open_store
from tests.llm_server import FakeLLM, running_llm_server
from tests.pg import isolated_postgres_url, pgbouncer_database, pgbouncer_store_url

# Subprocesses the tests start (the CLI, spawned workers) import this checkout, not
# whichever copy of the project happens to be installed.
_ROOT = str(Path(__file__).resolve().parent.parent)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != _ROOT]
)

BACKENDS = ["sqlite", "postgres"]
LEAK_GRACE_S = 5.0


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail a test that leaves actors running or threads alive.

    Threads started by the test get up to LEAK_GRACE_S to finish (joined, not
    slept on); any still alive, or any actor still registered, fails the test.
    """
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + LEAK_GRACE_S
    leaked_actors = pykka.ActorRegistry.get_all()
    if leaked_actors:
        pykka.ActorRegistry.stop_all(block=True, timeout=LEAK_GRACE_S)
    for thread in set(threading.enumerate()) - before:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    leaked_threads = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    problems = []
    if leaked_actors:
        problems.append(f"{len(leaked_actors)} actor(s) left running: {leaked_actors}")
    if leaked_threads:
        problems.append(f"thread(s) left running: {sorted(leaked_threads)}")
    if problems:
        pytest.fail("; ".join(problems))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store_url(backend: str, tmp_path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL for an empty, isolated database of the parametrized backend (``pgbouncer``:
    PostgreSQL through a PgBouncer in transaction mode, ``?pgbouncer=true``)."""
    if backend == "sqlite":
        yield str(tmp_path / "state.db")
    elif backend == "pgbouncer":
        yield pgbouncer_store_url(request.getfixturevalue("pgbouncer_db"))
    else:
        with isolated_postgres_url() as url:
            yield url


@pytest.fixture(scope="session")
def pgbouncer_db() -> Iterator[str]:
    """One throwaway database behind PgBouncer for the whole run (emptied per test)."""
    with pgbouncer_database() as name:
        yield name


@pytest.fixture
def pg_url() -> Iterator[str]:
    """An isolated PostgreSQL schema's URL, for PostgreSQL-only tests."""
    with isolated_postgres_url() as url:
        yield url


@pytest.fixture
def pg(pg_url: str):
    """A `PostgresStore` on an isolated schema, closed afterwards."""
    from persistence.postgres import PostgresStore  # the postgres extra may be absent

    store = PostgresStore(pg_url)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def sqlite_path(tmp_path) -> str:
    """A real SQLite file path (not :memory:) for SQLite-only tests."""
    return str(tmp_path / "state.db")


@pytest.fixture
def llm_server() -> Iterator[FakeLLM]:
    """A real chat-completions server on 127.0.0.1 (see tests/llm_server.py)."""
    with running_llm_server() as server:
        yield server
