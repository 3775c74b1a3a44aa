"""PostgreSQL behind a real PgBouncer in transaction mode (``pgbouncer=true``), and the
store's own URL options: removed before the driver sees the URL, unknown ones named."""

from __future__ import annotations

import json

import psycopg
import pytest

from persistence import open_store
from persistence._urls import split_store_options
from protocol import ConfigurationError, Message
from tests.cli.helpers import run_cli
from tests.pg import PGBOUNCER_URL

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def bouncer_url(pgbouncer_db: str) -> str:
    from tests.pg import pgbouncer_store_url

    return pgbouncer_store_url(pgbouncer_db)


@pytest.mark.parametrize(
    "url, driver_url, options",
    [
        ("postgresql://h/db?pgbouncer=true", "postgresql://h/db", {"pgbouncer": True}),
        (
            "postgresql://h/db?sslmode=require&pgbouncer=0&x=1",
            "postgresql://h/db?sslmode=require&x=1",
            {"pgbouncer": False},
        ),
        ("postgresql://h/db?application_name=a", "postgresql://h/db?application_name=a", {}),
        ("state.db", "state.db", {}),
    ],
)
def test_store_options_leave_the_url(url, driver_url, options):
    assert split_store_options(url) == (driver_url, options)


@pytest.mark.parametrize(
    "url, named",
    [
        ("postgresql://postgres@127.0.0.1:5432/test?pgbouncr=true", "pgbouncr"),  # a typo is named
        ("postgresql://postgres@127.0.0.1:5432/test?pgbouncer=maybe", "pgbouncer"),
        ("sqlite:///state.db?journal=wal", "journal"),  # SQLite URLs take only the store's options
    ],
)
def test_unknown_url_options_are_configuration_errors_naming_them(url, named, tmp_path):
    with pytest.raises(ConfigurationError, match=named):
        open_store(url.replace("state.db", str(tmp_path / "state.db")))
    assert not (tmp_path / "state.db").exists()


def test_a_keyword_contradicting_the_url_is_refused():
    with pytest.raises(ConfigurationError, match="pgbouncer"):
        open_store("postgresql://postgres@127.0.0.1:5432/test?pgbouncer=true", pgbouncer=False)


def test_the_store_works_behind_pgbouncer_without_prepared_statements_or_session_sets(bouncer_url):
    store = open_store(bouncer_url)
    try:
        store.create_session("s")
        for i in range(30):  # psycopg would prepare a statement run 5 times on one connection
            store.append("s", Message("user", f"m{i}"))
            assert store.get_session("s").id == "s" and len(store.transcript("s")) == i + 1
        lease = store.acquire_lease("s", "h", 30)
        store.commit_compaction(lease, watermark=30, compacted=[Message("user", "sum")], mode="rotate")
        assert store.transcript(store.resolve("s"))[0].content == "sum"
        with pytest.raises(ConfigurationError, match="LISTEN"):
            store.listen_compactions()
        # no session-level SET reached the server connections PgBouncer shares
        plain = split_store_options(bouncer_url)[0]
        for _ in range(5):
            with psycopg.connect(plain, prepare_threshold=None, autocommit=True) as conn:
                assert conn.execute("SHOW lock_timeout").fetchone()[0] == "0"
                assert conn.execute("SHOW statement_timeout").fetchone()[0] == "0"
    finally:
        store.close()


def test_simulate_with_two_processes_through_pgbouncer(capsys, bouncer_url):
    result = run_cli(
        capsys,
        "simulate",
        "--db",
        bouncer_url,
        "--processes",
        "2",
        "--sessions",
        "6",
        "--turns",
        "12",
        "--threads",
        "3",
        "--seed",
        "5",
        "--json",
    )
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["ok"] is True and report["messages_acknowledged"] > 0
    assert PGBOUNCER_URL.split("@")[-1] in report["database"]
    for command in (["sessions", "--limit", "0"], ["fsck"], ["locks", "--reap"]):  # the CLI, same URL
        done = run_cli(capsys, "--db", bouncer_url, *command, "--json")
        assert done.code == 0, (command, done.err)
