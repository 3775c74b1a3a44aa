"""The read-only commands on a prepared database, on both backends."""

from __future__ import annotations

import json

import pytest

from persistence import open_store
from tests.cli.helpers import build_lineage_db, run_cli

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def db(store_url: str) -> tuple[str, dict[str, str]]:
    return store_url, build_lineage_db(store_url)


def test_sessions_table_and_json(capsys, db) -> None:
    url, ids = db
    table = run_cli(capsys, "--db", url, "sessions")
    assert table.code == 0, table.err
    for sid in ids.values():
        assert sid in table.out
    assert "ended (compression)" in table.out
    assert "\x1b[" not in table.out  # no colour codes when not a terminal

    doc = run_cli(capsys, "sessions", "--db", url, "--json")
    assert doc.code == 0
    sessions = {s["id"]: s for s in json.loads(doc.out)["sessions"]}
    assert set(sessions) == set(ids.values())
    assert sessions[ids["child"]]["parent_session_id"] == ids["root"]
    assert sessions[ids["child"]]["live_messages"] == 4
    assert sessions[ids["root"]]["live"] is False

    live = json.loads(run_cli(capsys, "--json", "sessions", "--live", "--db", url).out)
    assert ids["root"] not in {s["id"] for s in live["sessions"]}
    limited = json.loads(run_cli(capsys, "--db", url, "--json", "sessions", "--limit", "1").out)
    assert len(limited["sessions"]) == 1


def test_show_transcript_and_archive(capsys, db) -> None:
    url, ids = db
    plain = run_cli(capsys, "--db", url, "show", ids["child"])
    assert plain.code == 0, plain.err
    assert "after rotation" in plain.out and "summary of hello" in plain.out
    assert "[tag] brackets" in plain.out  # carried tail, printed verbatim (no markup)

    doc = json.loads(run_cli(capsys, "--db", url, "show", ids["root"], "--archive", "--json").out)
    assert doc["session"]["end_reason"] == "compression"
    assert doc["live_tip"] == ids["child"] and doc["forked"] is False
    assert doc["transcript"] == []
    assert [m["seq"] for m in doc["archive"]] == [1, 2, 3, 4]
    assert {m["state"] for m in doc["archive"]} == {"compacted", "superseded"}
    assert doc["compactions"][0]["child_session_id"] == ids["child"]
    assert doc["compactions"][0]["mode"] == "rotate"

    no_archive = json.loads(run_cli(capsys, "--json", "--db", url, "show", ids["inplace"]).out)
    assert "archive" not in no_archive
    assert [m["content"] for m in no_archive["transcript"]] == ["short"]


def test_lineage_chain_and_json(capsys, db) -> None:
    url, ids = db
    chain = run_cli(capsys, "lineage", ids["child"], "--db", url)
    assert chain.code == 0, chain.err
    assert "a straight chain of 2 session(s)" in chain.out
    lines = chain.out.splitlines()
    root_line = next(i for i, line in enumerate(lines) if line.split()[1:2] == [ids["root"]])
    child_line = next(i for i, line in enumerate(lines) if line.split()[1:2] == [ids["child"]])
    assert child_line > root_line
    assert "live tip" in lines[child_line] and "asked" in lines[child_line]

    doc = json.loads(run_cli(capsys, "--json", "lineage", ids["root"], "--db", url).out)
    assert doc["root"] == ids["root"] and doc["live_tip"] == ids["child"]
    assert [(row["id"], row["depth"]) for row in doc["sessions"]] == [(ids["root"], 0), (ids["child"], 1)]
    assert doc["straight"] is True and doc["count"] == 2


def test_locks_reports_live_leases(capsys, db) -> None:
    url, ids = db
    empty = json.loads(run_cli(capsys, "--db", url, "locks", "--json").out)
    assert empty["leases"] == []
    store = open_store(url)
    try:
        lease = store.acquire_lease(ids["idle"], "worker-7", 300)
        doc = json.loads(run_cli(capsys, "--db", url, "locks", "--json").out)
        assert [(x["session_id"], x["holder"], x["token"], x["live"]) for x in doc["leases"]] == [
            (ids["idle"], "worker-7", lease.token, True)
        ]
        table = run_cli(capsys, "--db", url, "locks")
        assert "worker-7" in table.out and "live" in table.out
        store.release_lease(lease)
    finally:
        store.close()


def test_fsck_passes_a_clean_database(capsys, db) -> None:
    url, _ids = db
    result = run_cli(capsys, "--db", url, "fsck")
    assert result.code == 0, result.out
    assert "no problems" in result.out
    doc = json.loads(run_cli(capsys, "fsck", "--json", "--db", url).out)
    assert doc["ok"] is True and doc["problems"] == []
    assert doc["sessions_checked"] == 4
    assert doc["messages_checked"] == 4 + 4 + 5  # root archive, child (2 + tail + 1), in-place


def test_keys_show_in_show_and_survive_export(tmp_path, capsys):
    import json

    from persistence import open_store
    from protocol import Message

    from .helpers import run_cli

    url = str(tmp_path / "keys.db")
    with open_store(url) as store:
        store.create_session("s")
        store.append("s", [Message("user", "from discord", key="discord:123"), Message("assistant", "no key")])
    shown = run_cli(capsys, "show", "s", "--db", url)
    assert shown.code == 0 and "discord:123" in shown.out
    as_json = run_cli(capsys, "show", "s", "--db", url, "--format", "json")
    assert "discord:123" in as_json.out
    exported = run_cli(capsys, "export", "s", "--db", url)
    assert exported.code == 0
    assert any('"key": "discord:123"' in line or '"key":"discord:123"' in line for line in exported.out.splitlines())
    assert json.dumps("discord:123") in exported.out


def test_locks_lists_the_turns_open(tmp_path, capsys):
    import json

    from persistence import open_store

    from .helpers import run_cli

    url = str(tmp_path / "turns.db")
    with open_store(url) as store:
        store.create_session("s")
        lease = store.open_turn("s", "gateway-7", 60)
        store.interrupt_turn("s")
        table = run_cli(capsys, "locks", "--db", url)
        assert table.code == 0 and "1 turn(s) open" in table.out and "gateway-7" in table.out
        doc = json.loads(run_cli(capsys, "locks", "--db", url, "--format", "json").out)
        assert [(t["session_id"], t["holder"], t["token"], t["interrupted"]) for t in doc["turns"]] == [
            ("s", "gateway-7", lease.token, True)
        ]
        store.close_turn(lease)
        assert json.loads(run_cli(capsys, "locks", "--db", url, "--format", "json").out)["turns"] == []


def test_show_of_a_rotated_id_says_where_the_conversation_lives(tmp_path, capsys):
    from persistence import open_store
    from protocol import Message

    from .helpers import run_cli

    url = str(tmp_path / "rotated.db")
    with open_store(url) as store:
        store.create_session("root")
        store.append("root", [Message("user", "a"), Message("assistant", "b")])
        lease = store.acquire_lease("root", "h", 30)
        child = store.commit_compaction(lease, watermark=2, compacted=[Message("user", "sum")], mode="rotate")
    shown = run_cli(capsys, "show", "root", "--db", url)
    assert shown.code == 0
    assert f"the conversation is live in {child.child_session_id}" in " ".join(shown.out.split())
