"""Backend selection from URLs and paths, and URL display without secrets."""

from __future__ import annotations

import pytest

from persistence._urls import display_url, parse_store_url
from protocol import ConfigurationError


@pytest.mark.parametrize(
    "text, expected",
    [
        ("state.db", ("sqlite", "state.db")),
        ("/var/lib/x/state.db", ("sqlite", "/var/lib/x/state.db")),
        ("sqlite:///rel.db", ("sqlite", "rel.db")),
        ("sqlite:////abs/state.db", ("sqlite", "/abs/state.db")),
        ("postgresql://u@h/db", ("postgresql", "postgresql://u@h/db")),
        ("postgres://u@h/db", ("postgresql", "postgres://u@h/db")),
    ],
)
def test_urls_pick_the_backend(text, expected):
    assert parse_store_url(text) == expected


@pytest.mark.parametrize("bad", ["", "  ", "mysql://h/db", ":memory:", "sqlite://", "sqlite:///:memory:"])
def test_bad_urls_are_configuration_errors(bad):
    with pytest.raises(ConfigurationError):
        parse_store_url(bad)


def test_display_url_masks_only_the_password():
    assert display_url("postgresql://u:s3cret@h:5433/db?x=1") == "postgresql://u:***@h:5433/db?x=1"
    assert display_url("postgresql://h/db") == "postgresql://h/db"
    assert display_url("state.db") == "state.db"


@pytest.mark.parametrize(
    "url, shown",
    [
        (
            "postgresql://u:s3cret@h/db?sslmode=require&password=s3cret&options=-c%20x",
            "postgresql://u:***@h/db?sslmode=require&password=***&options=-c%20x",
        ),
        (
            "postgresql://u@h1:5432,h2:5433/db?sslpassword=s3cret#f",
            "postgresql://u@h1:5432,h2:5433/db?sslpassword=***#f",
        ),
        ("postgres://:s3cret@/db?host=/run/pg", "postgres://:***@/db?host=/run/pg"),
        ("postgresql://u:p@ss:s3cret@h/db", "postgresql://u:***@h/db"),  # an unencoded @ in the password
        ("postgresql://h/db?PassWord=s3cret&Api_Key=s3cret&x=1", "postgresql://h/db?PassWord=***&Api_Key=***&x=1"),
        ("postgresql://h/db?pass%77ord=s3cret", "postgresql://h/db?pass%77ord=***"),  # an encoded key
        ("sqlite:///x.db?token=s3cret", "sqlite:///x.db?token=***"),
    ],
)
def test_display_url_masks_every_password(url, shown):
    assert display_url(url) == shown
    assert "s3cret" not in display_url(url)


@pytest.mark.parametrize(
    "bad", ["state\x00.db", "postgresql://u@h/d\x00b", "/tmp/x\ud800.db", "postgresql://u@h/d\udcff"]
)
def test_nul_and_lone_surrogates_are_configuration_errors_naming_no_text(bad):
    from persistence import open_store

    with pytest.raises(ConfigurationError) as caught:
        open_store(bad)
    assert "position" in str(caught.value) and bad not in str(caught.value)


def test_a_malformed_postgresql_url_never_shows_its_password():
    pytest.importorskip("psycopg")
    from persistence import open_store

    with pytest.raises(ConfigurationError) as caught:
        open_store("postgresql://gw:hunter2-secret@[not-closed/db")
    assert "hunter2" not in str(caught.value) and "***" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no chained driver text


def test_a_password_inside_libpq_options_is_masked():
    shown = display_url("postgresql://gw@db/gw?options=-c%20password%3Dhunter2&sslmode=require")
    assert "hunter2" not in shown and shown.endswith("options=***&sslmode=require")


def test_the_cli_masks_a_url_given_as_a_stray_argument(capsys):
    from tests.cli.helpers import run_cli

    result = run_cli(capsys, "sessions", "postgresql://gw:hunter2@db/gw")
    assert result.code == 2 and "hunter2" not in result.err and "postgresql://gw:***@db/gw" in result.err


def test_a_wrong_postgresql_url_says_why_and_shows_no_password():
    pytest.importorskip("psycopg")
    from persistence import open_store
    from tests.pg import PG_URL

    wrong = PG_URL.replace("postgres@", "nobody-here:hunter2@", 1)
    if wrong == PG_URL:
        pytest.skip("the test PostgreSQL URL has no user to replace")
    with pytest.raises(ConfigurationError) as caught:
        open_store(wrong)
    assert "nobody-here" in str(caught.value) and "does not exist" in str(caught.value)
    assert "hunter2" not in str(caught.value) and caught.value.__cause__ is None
