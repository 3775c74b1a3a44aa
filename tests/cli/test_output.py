"""The CLI's output as a user meets it: subprocesses, piped and on a terminal, with
COLUMNS and NO_COLOR set and unset; every format of every data command."""

from __future__ import annotations

import csv
import io
import json
import re
import shlex

import pytest

from persistence import open_store
from protocol import Message
from tests.cli.helpers import build_lineage_db, run_on_terminal, run_piped

pytestmark = pytest.mark.timeout(120)

#: Ids longer than any terminal column: a table that cut them would be caught.
LONG = "discord:guild-8231/channel-4410/thread-" + "x" * 40
ESC = "\x1b["
SGR_COLOR = re.compile(r"\x1b\[[0-9;]*(3[0-9]|4[0-9]|9[0-7])[0-9;]*m")


@pytest.fixture
def db(sqlite_path: str) -> tuple[str, dict[str, str]]:
    ids = build_lineage_db(sqlite_path)
    store = open_store(sqlite_path)
    try:
        for n in range(3):
            store.create_session(f"{LONG}-{n}", source="discord")
            store.append(f"{LONG}-{n}", [Message("user", f"hello {n}"), Message("assistant", "hi")])
    finally:
        store.close()
    return sqlite_path, ids | {f"long{n}": f"{LONG}-{n}" for n in range(3)}


def column_cells(table: str, index: int) -> str:
    """The text of one boxed-table column, its folded pieces joined in order."""
    pieces = []
    for line in table.splitlines():
        if line.startswith("│"):
            cells = line.split("│")[1:-1]
            pieces.append(cells[index].strip())
    return "".join(pieces)


def test_piped_table_keeps_every_id_whole_on_one_line(db) -> None:
    url, ids = db
    result = run_piped("--db", url, "sessions")
    assert result.code == 0, result.err
    assert ESC not in result.out and "│" not in result.out and "…" not in result.out
    lines = result.out.splitlines()
    for sid in ids.values():
        assert any(line.split()[:1] == [sid] for line in lines), sid


@pytest.mark.parametrize("no_color", [None, "1"])
def test_terminal_table_folds_ids_and_honours_no_color(db, no_color) -> None:
    url, ids = db
    result = run_on_terminal("--db", url, "sessions", columns=70, NO_COLOR=no_color)
    assert result.code == 0, result.out
    assert "…" not in result.out
    plain = re.sub(r"\x1b\[[0-9;]*m", "", result.out)
    assert max(len(line) for line in plain.splitlines()) <= 70
    ids_column = column_cells(plain, 0)
    for sid in ids.values():
        assert sid in ids_column  # folded across lines, never cut
    if no_color:
        assert ESC not in result.out
    else:
        assert ESC in result.out


def test_columns_folds_a_piped_table_to_that_width(db) -> None:
    url, _ = db
    result = run_piped("--db", url, "sessions", COLUMNS="50")
    assert result.code == 0, result.err
    assert ESC not in result.out and "…" not in result.out
    assert max(len(line.rstrip()) for line in result.out.splitlines()) <= 50
    assert LONG not in result.out  # folded: too long for 50 columns


def test_csv_ndjson_json_carry_the_same_rows(db) -> None:
    url, ids = db
    rows = list(csv.DictReader(io.StringIO(run_piped("--db", url, "sessions", "--format", "csv").out)))
    lines = run_piped("sessions", "--db", url, "--format", "ndjson").out.splitlines()
    objects = [json.loads(line) for line in lines]
    doc = json.loads(run_piped("--format", "json", "sessions", "--db", url).out)
    assert [r["id"] for r in rows] == [o["id"] for o in objects] == [s["id"] for s in doc["sessions"]]
    assert set(r["id"] for r in rows) == set(ids.values())
    by_id = {r["id"]: r for r in rows}
    assert by_id[ids["root"]]["live"] == "false" and by_id[ids["root"]]["end_reason"] == "compression"
    assert by_id[ids["long0"]]["live_messages"] == "2"
    assert doc["more"] is False and doc["next_after"] is None


def test_json_is_exactly_one_document_and_conflicts_are_usage_errors(db) -> None:
    url, ids = db
    for argv in (
        ["show", ids["child"], "--archive"],
        ["lineage", ids["root"]],
        ["locks"],
        ["fsck"],
        ["sessions", "--limit", "1"],
    ):
        result = run_piped("--db", url, "--json", *argv)
        assert result.code == 0, (argv, result.err)
        json.loads(result.out)  # one document, nothing before or after it
        assert json.loads(run_piped("--db", url, "--format", "json", *argv).out) == json.loads(result.out) or argv[
            0
        ] in ("locks", "fsck")  # these carry the store's clock
    clash = run_piped("--db", url, "sessions", "--json", "--format", "csv")
    assert clash.code == 2 and clash.out == "" and len(clash.err.splitlines()) == 1


@pytest.mark.parametrize("command", [["show", "chat:root", "--archive"], ["lineage", "chat:root"], ["locks"], ["fsck"]])
@pytest.mark.parametrize("fmt", ["csv", "ndjson"])
def test_every_data_command_speaks_csv_and_ndjson(db, command, fmt) -> None:
    url, _ = db
    result = run_piped("--db", url, "--format", fmt, *command)
    assert result.code == 0, result.err
    if fmt == "ndjson":
        for line in result.out.splitlines():
            assert isinstance(json.loads(line), dict)
    else:
        table = list(csv.reader(io.StringIO(result.out)))
        assert table and all(len(row) == len(table[0]) for row in table)


def test_sessions_says_more_exist_and_how_to_page(db) -> None:
    url, ids = db
    first = run_piped("--db", url, "sessions", "--limit", "2")
    assert first.code == 0 and "more sessions exist" in first.out
    doc = json.loads(run_piped("--db", url, "sessions", "--limit", "2", "--json").out)
    assert doc["more"] is True and doc["next_after"] == doc["sessions"][-1]["id"]
    machine = run_piped("--db", url, "sessions", "--limit", "2", "--format", "csv")
    assert "more sessions exist" in machine.err and "more" not in machine.out  # stdout stays data
    everything = json.loads(run_piped("--db", url, "sessions", "--limit", "0", "--json").out)
    assert everything["more"] is False and len(everything["sessions"]) == len(ids)
    hint = next(line for line in first.out.splitlines() if "more sessions exist" in line)
    if "--after" in hint:  # keyset paging: the printed command gives the next page
        argv = shlex.split(hint.split("next page: ", 1)[1])[1:]
        page = json.loads(run_piped(*argv, "--json").out)
        assert [s["id"] for s in page["sessions"]] == [s["id"] for s in everything["sessions"][2:4]]
    else:
        assert "--limit" in hint
    exact = run_piped("--db", url, "sessions", "--limit", str(len(ids)))
    assert "more sessions exist" not in exact.out + exact.err


def test_show_tail(db) -> None:
    url, ids = db
    doc = json.loads(run_piped("--db", url, "show", ids["child"], "--tail", "2", "--json").out)
    assert doc["live_messages"] == 4
    assert [m["content"] for m in doc["transcript"]] == ["[tag] brackets", "after rotation"]
    table = run_piped("--db", url, "show", ids["child"], "--tail", "1")
    assert "last 1 of 4" in table.out and "after rotation" in table.out and "hello" not in table.out
    bad = run_piped("--db", url, "show", ids["child"], "--tail", "0")
    assert bad.code == 2 and len(bad.err.splitlines()) == 1


def rotate(url: str, session_id: str, times: int) -> str:
    store = open_store(url)
    try:
        for n in range(times):
            store.append(session_id, [Message("user", f"q{n}"), Message("assistant", f"a{n}")])
            lease = store.acquire_lease(session_id, "test", 60)
            record = store.commit_compaction(
                lease,
                watermark=store.transcript(session_id)[-1].seq,
                mode="rotate",
                compacted=[Message("user", "summary")],
            )
            session_id = record.child_session_id
        return session_id
    finally:
        store.close()


def test_lineage_of_a_long_chain_is_one_short_list(sqlite_path: str) -> None:
    store = open_store(sqlite_path)
    store.create_session(LONG)
    store.close()
    tip = rotate(sqlite_path, LONG, 30)
    result = run_piped("--db", sqlite_path, "lineage", tip)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert len(lines) <= 8, result.out  # not a 31-level staircase
    assert "a straight chain of 31 session(s)" in lines[0]
    assert "... 29 continuation(s) ..." in result.out
    assert any(line.split()[1:2] == [LONG] for line in lines)
    assert any(line.split()[1:2] == [tip] and "live tip" in line for line in lines)
    rows = json.loads(run_piped("--db", sqlite_path, "lineage", LONG, "--json").out)
    assert rows["count"] == 31 and rows["straight"] is True and rows["live_tip"] == tip


def test_lineage_with_a_fork_is_a_tree_with_the_fork_marked(sqlite_path: str) -> None:
    store = open_store(sqlite_path)
    try:
        store.create_session("p")
        store.append("p", Message("user", "hi"))
        store.end_session("p", "compression")
        store.create_session("p-a", parent_session_id="p")
        store.create_session("p-b", parent_session_id="p")
    finally:
        store.close()
    deep = rotate(sqlite_path, "p-a", 10)
    result = run_piped("--db", sqlite_path, "lineage", "p-b")
    assert result.code == 0, result.err
    assert "FORK: 2 children" in result.out and "FORKED" in result.out
    assert "├── p-a" in result.out and "└── p-b" in result.out
    assert "... 9 continuation(s) ..." in result.out and deep in result.out
    assert len(result.out.splitlines()) <= 10


def test_help_of_every_command_lists_formats(sqlite_path: str) -> None:
    for command in ("sessions", "show", "lineage", "locks", "fsck", "compact", "simulate"):
        result = run_piped(command, "--help")
        assert result.code == 0 and "--format" in result.out and "ndjson" in result.out, command
