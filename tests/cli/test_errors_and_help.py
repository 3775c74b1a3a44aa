"""Exit statuses, one-line errors, --db placement, help text and the CLI reference (docs/cli.md)."""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.cli.helpers import COMMANDS, build_lineage_db, run_cli

pytestmark = pytest.mark.timeout(60)

CLI_DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def assert_one_line_error(result, *needles: str) -> None:
    assert result.code == 2
    assert result.out == ""
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions"],
        ["show", "x"],
        ["lineage", "x"],
        ["locks"],
        ["locks", "--reap"],
        ["migrate"],
        ["fsck"],
        ["compact", "x"],
    ],
)
def test_missing_database_is_exit_2_and_not_created(capsys, tmp_path, argv) -> None:
    missing = tmp_path / "nope.db"
    result = run_cli(capsys, "--db", str(missing), *argv)
    assert_one_line_error(result, "not found", str(missing))
    assert not missing.exists()


def test_default_database_comes_from_the_environment(capsys, tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "env.db")
    build_lineage_db(path)
    monkeypatch.setenv("SESSION_ACTORS_DB", path)
    result = run_cli(capsys, "sessions", "--json")
    assert result.code == 0
    assert len(json.loads(result.out)["sessions"]) == 4
    monkeypatch.delenv("SESSION_ACTORS_DB")
    monkeypatch.chdir(tmp_path)  # the last default, ./state.db, is missing here
    assert_one_line_error(run_cli(capsys, "sessions"), "state.db")


def test_db_before_or_after_the_subcommand(capsys, sqlite_path) -> None:
    build_lineage_db(sqlite_path)
    before = run_cli(capsys, "--db", sqlite_path, "--json", "sessions")
    after = run_cli(capsys, "sessions", "--json", "--db", sqlite_path)
    mixed = run_cli(capsys, "--json", "sessions", f"--db={sqlite_path}")
    assert before.code == after.code == mixed.code == 0
    assert json.loads(before.out) == json.loads(after.out) == json.loads(mixed.out)


@pytest.mark.parametrize("command", ["show", "lineage", "compact"])
def test_unknown_session_id_is_exit_2(capsys, sqlite_path, command) -> None:
    build_lineage_db(sqlite_path)
    result = run_cli(capsys, "--db", sqlite_path, command, "no-such-session")
    assert_one_line_error(result, "no-such-session", "not found")


def test_invalid_session_id_is_exit_2(capsys, sqlite_path) -> None:
    build_lineage_db(sqlite_path)
    result = run_cli(capsys, "--db", sqlite_path, "show", " padded ")
    assert_one_line_error(result, "invalid session id")


@pytest.mark.parametrize("url", ["mysql://host/db", "sqlite://", ":memory:"])
def test_bad_url_is_exit_2(capsys, url) -> None:
    assert_one_line_error(run_cli(capsys, "--db", url, "sessions"))


def test_unreachable_postgres_is_exit_2(capsys) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_cli(capsys, "--db", f"postgresql://postgres@127.0.0.1:{port}/x", "sessions")
    assert_one_line_error(result, "PostgreSQL")


def test_a_file_that_is_not_a_session_store_is_exit_2(capsys, tmp_path) -> None:
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE t (x)")
    assert_one_line_error(run_cli(capsys, "--db", str(other), "fsck"), "not a session-actors")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite at all" * 100)
    assert_one_line_error(run_cli(capsys, "--db", str(garbage), "fsck"))


def test_usage_errors_are_one_line_exit_2(capsys) -> None:
    assert_one_line_error(run_cli(capsys, "no-such-command"), "invalid choice")
    assert_one_line_error(run_cli(capsys, "compact", "x", "--mode", "sideways"), "--mode")
    assert run_cli(capsys).code == 2  # no command: help on stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(capsys, command) -> None:
    result = run_cli(capsys, command, "--help")
    assert result.code == 0
    assert f"session-actors {command}" in result.out
    assert "example:" in result.out and "--db" in result.out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_of_every_command_has_a_help_text(capsys, command) -> None:
    lines = run_cli(capsys, command, "--help").out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("options:"))
    bare = []
    for i, line in enumerate(lines[start + 1 :], start + 1):
        if not line.startswith("  -"):
            continue
        words = line.strip().split("  ")  # argparse puts two spaces before the help text
        following = lines[i + 1] if i + 1 < len(lines) else ""
        continues = following.startswith(" " * 8) and not following.strip().startswith("-")
        if len(words) == 1 and not continues:
            bare.append(line.strip())
    assert bare == []


def test_top_level_help_lists_every_command(capsys) -> None:
    result = run_cli(capsys, "--help")
    assert result.code == 0
    for command in COMMANDS:
        assert re.search(rf"^\s+{command}\s", result.out, re.M), command


def test_the_cli_reference_documents_every_command() -> None:
    text = CLI_DOCS.read_text(encoding="utf-8")
    start, end = text.index("<!-- cli:start -->"), text.index("<!-- cli:end -->")
    section = text[start:end]
    for command in COMMANDS:
        assert f"session-actors {command}" in section, command
    assert "--db" in section and "--json" in section


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(tmp_path):
    import subprocess
    import sys

    from persistence import open_store
    from protocol import Message

    db = str(tmp_path / "big.db")
    with open_store(db) as store:
        store.create_session("big")
        store.append("big", [Message("user", "x" * 80) for _ in range(5000)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "actors.cli", "--db", db, "export", "big"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()  # like `| head -1`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(60) == 141
    assert "Broken pipe" not in err and "Traceback" not in err
