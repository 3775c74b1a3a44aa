"""The CLI's side of typed input: numbers out of range are usage errors (exit 2, one
line), and a password in the database URL is never printed."""

from __future__ import annotations

import json

import pytest

from tests.cli.helpers import build_lineage_db, run_cli

pytestmark = pytest.mark.timeout(120)

SECRET = "hunter2-s3cret"


@pytest.mark.parametrize("value", ["9999999999999999999999", "-1", "2147483647", "ten"])
def test_sessions_limit_out_of_range_is_exit_2(capsys, sqlite_path, value):
    build_lineage_db(sqlite_path)
    result = run_cli(capsys, "--db", sqlite_path, "sessions", "--limit", value)
    assert result.code == 2 and result.out == ""
    assert len(result.err.strip().splitlines()) == 1 and "--limit" in result.err
    assert "Traceback" not in result.err


def test_largest_limit_works(capsys, sqlite_path):
    build_lineage_db(sqlite_path)
    result = run_cli(capsys, "--db", sqlite_path, "sessions", "--limit", "2147483646", "--json")
    assert result.code == 0 and len(json.loads(result.out)["sessions"]) == 4


def test_no_command_prints_a_password_from_the_url(capsys, pg_url):
    # trust auth: the server never asks, so the password is carried but never needed
    url = f"{pg_url}&password={SECRET}"
    build_lineage_db(url)
    runs = [
        run_cli(capsys, "--db", url, "simulate", "--sessions", "2", "--turns", "3", "--threads", "2", "--seed", "1"),
        run_cli(
            capsys,
            "--db",
            url,
            "simulate",
            "--sessions",
            "2",
            "--turns",
            "3",
            "--threads",
            "2",
            "--seed",
            "1",
            "--json",
        ),
        run_cli(capsys, "--db", url, "sessions", "--limit", "1"),  # prints the next page's command
        run_cli(capsys, "--db", url, "sessions", "--limit", "1", "--json"),
        run_cli(capsys, "--db", url + "&sslmode=bogus", "sessions"),  # an error naming the server
    ]
    assert [r.code for r in runs] == [0, 0, 0, 0, 2], [r.err for r in runs]
    assert "database postgresql://" in runs[0].out and "password=***" in runs[0].out
    for result in runs:
        assert SECRET not in result.out + result.err
