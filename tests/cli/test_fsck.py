"""fsck finds each kind of damage in a database crafted to contain it.

Damage the public API allows (a fork: two continuations of one compression-ended
parent) is made through it, on both backends; the rest is crafted with direct
SQL on a SQLite file, since the store refuses to write it.
"""

from __future__ import annotations

import json

import pytest

from persistence import open_store
from protocol import Message
from tests.cli.helpers import build_lineage_db, run_cli, sql

pytestmark = pytest.mark.timeout(60)


def fsck(capsys, url: str) -> tuple[int, dict]:
    result = run_cli(capsys, "--db", url, "fsck", "--json")
    assert result.err == ""
    return result.code, json.loads(result.out)


def kinds(doc: dict) -> list[tuple[str, str]]:
    return sorted((p["kind"], p["session_id"]) for p in doc["problems"])


def warning_kinds(doc: dict) -> list[tuple[str, str]]:
    return sorted((w["kind"], w["session_id"]) for w in doc["warnings"])


def test_fork_and_orphan_writes_in_non_oldest_children(capsys, store_url: str) -> None:
    store = open_store(store_url)
    try:
        store.create_session("p")
        store.append("p", Message("user", "hi"))
        store.end_session("p", "compression")  # the upstream path: end, then create a child
        store.create_session("p-child-a", parent_session_id="p")
        store.create_session("p-child-b", parent_session_id="p")
        store.append("p-child-a", Message("user", "followed"))
        store.append("p-child-b", Message("user", "silent write"))
    finally:
        store.close()
    code, doc = fsck(capsys, store_url)
    assert code == 1 and doc["ok"] is False
    assert ("fork", "p") in kinds(doc)
    assert ("orphan_write", "p-child-b") in kinds(doc)
    assert ("orphan_write", "p-child-a") not in kinds(doc)  # the oldest child is followed
    assert ("orphan_write", "p") not in kinds(doc)  # "hi" was written before p ended
    assert warning_kinds(doc) == [("stranded_live_rows", "p")]
    assert doc["counts"]["fork"] == 1 and doc["counts"]["orphan_write"] == 1

    table = run_cli(capsys, "fsck", "--db", store_url)
    assert table.code == 1 and "fork" in table.out and "p-child-b" in table.out

    tree = run_cli(capsys, "lineage", "p-child-b", "--db", store_url)
    assert tree.code == 0 and "FORK: 2 children" in tree.out and "FORKED" in tree.out
    doc = json.loads(run_cli(capsys, "lineage", "p", "--json", "--db", store_url).out)
    assert doc["forked"] is True and doc["live_tip"] is None
    children = [row["id"] for row in doc["sessions"] if row["parent_session_id"] == "p"]
    assert children == ["p-child-a", "p-child-b"]
    assert [row["id"] for row in doc["sessions"] if row["fork"]] == ["p"]


def end_with_a_late_row(path: str, reason: str, *, continuation: str | None = None) -> None:
    """Session ``s`` with two rows, ended for ``reason``; its seq 2 is then dated after the
    end, as if a write got in (the store refuses one, so the row is crafted)."""
    store = open_store(path)
    try:
        store.create_session("s")
        store.append("s", [Message("user", "before"), Message("assistant", "late")])
        ended = store.end_session("s", reason)
        if continuation is not None:
            store.create_session(continuation, parent_session_id="s")
    finally:
        store.close()
    sql(path, "UPDATE messages SET created_at = ? WHERE session_id = 's' AND seq = 2", ended.ended_at + 30)


def test_write_after_end_is_an_orphan_write(capsys, sqlite_path: str) -> None:
    end_with_a_late_row(sqlite_path, "user_closed")
    code, doc = fsck(capsys, sqlite_path)
    assert code == 1
    assert kinds(doc) == [("orphan_write", "s")]
    assert "after the session ended" in doc["problems"][0]["detail"]


def test_live_rows_left_before_a_compression_end_are_a_warning_not_a_problem(capsys, store_url: str) -> None:
    # Reachable through the public API: append, end for compression, continue.
    store = open_store(store_url)
    try:
        store.create_session("p")
        store.append("p", [Message("user", "still live"), Message("assistant", "me too")])
        store.end_session("p", "compression")  # ended without a compaction commit
        store.create_session("p2", parent_session_id="p")
        store.append("p2", Message("user", "continued"))
    finally:
        store.close()
    code, doc = fsck(capsys, store_url)
    assert code == 0 and doc["ok"] is True
    assert doc["problems"] == [] and all(n == 0 for n in doc["counts"].values())
    assert warning_kinds(doc) == [("stranded_live_rows", "p")]
    assert "2 live message(s)" in doc["warnings"][0]["detail"]

    text = run_cli(capsys, "fsck", "--db", store_url)
    assert text.code == 0
    assert "stranded_live_rows" in text.out and "p" in text.out and "ok: no problems" in text.out


def test_write_after_a_compression_end_is_an_orphan_write(capsys, sqlite_path: str) -> None:
    end_with_a_late_row(sqlite_path, "compression", continuation="s2")
    code, doc = fsck(capsys, sqlite_path)
    assert code == 1
    assert kinds(doc) == [("orphan_write", "s")]
    assert "1 message(s) written after the session ended (first seq 2)" in doc["problems"][0]["detail"]
    # the row written before the end is still only a warning
    assert warning_kinds(doc) == [("stranded_live_rows", "s")]
    assert "1 live message(s)" in doc["warnings"][0]["detail"]


def test_rows_a_compaction_archived_are_not_orphan_writes(capsys, sqlite_path: str) -> None:
    ids = build_lineage_db(sqlite_path)
    # A compaction commit archives the parent's rows as it ends it; on PostgreSQL such a
    # row's created_at can land a hair after ended_at. Archived rows never count.
    sql(sqlite_path, "UPDATE messages SET created_at = created_at + 3600 WHERE session_id = ?", ids["root"])
    code, doc = fsck(capsys, sqlite_path)
    assert code == 0, doc["problems"]
    assert doc["problems"] == [] and doc["warnings"] == []


@pytest.mark.parametrize("damage", ["delete", "shift"])
def test_seq_gap(capsys, sqlite_path: str, damage: str) -> None:
    store = open_store(sqlite_path)
    try:
        store.create_session("s")
        store.append("s", [Message("user", f"m{i}") for i in range(5)])
        store.create_session("fine")
        store.append("fine", Message("user", "x"))
    finally:
        store.close()
    if damage == "delete":
        sql(sqlite_path, "DELETE FROM messages WHERE session_id = 's' AND seq = 3")
    else:
        sql(sqlite_path, "UPDATE messages SET seq = 9 WHERE session_id = 's' AND seq = 5")
    code, doc = fsck(capsys, sqlite_path)
    assert code == 1
    assert kinds(doc) == [("seq_gap", "s")]
    assert "missing seqs" in doc["problems"][0]["detail"]


def test_lineage_cycle(capsys, sqlite_path: str) -> None:
    store = open_store(sqlite_path)
    try:
        for sid in ("a", "b", "c"):
            store.create_session(sid)
    finally:
        store.close()
    sql(sqlite_path, "UPDATE sessions SET parent_session_id = 'b' WHERE id = 'a'")
    sql(sqlite_path, "UPDATE sessions SET parent_session_id = 'a' WHERE id = 'b'")
    code, doc = fsck(capsys, sqlite_path)
    assert code == 1
    assert kinds(doc) == [("lineage_cycle", "a")]  # reported once, not once per member
    assert doc["problems"][0]["detail"] in ("a -> b -> a", "b -> a -> b")
    # lineage on a cyclic id still terminates and prints both members
    tree = run_cli(capsys, "--db", sqlite_path, "lineage", "a")
    assert tree.code == 0 and "a" in tree.out and "b" in tree.out


def test_expired_lease_is_a_warning_and_locks_reap_releases_it(capsys, store_url: str) -> None:
    build_lineage_db(store_url)
    store = open_store(store_url)
    try:
        live = store.acquire_lease("chat:idle", "worker-live", 300)
        leaked = store.acquire_lease("chat:inplace", "worker-dead", 0.001)
        while store.now() <= leaked.expires_at:  # the store's own clock decides expiry
            pass
    finally:
        store.close()
    code, doc = fsck(capsys, store_url)
    assert code == 0 and doc["ok"] is True and doc["problems"] == []  # garbage, not damage
    assert ("expired_lease", "chat:inplace") in warning_kinds(doc)
    assert "expired_lease" not in doc["counts"]
    assert [x["holder"] for x in doc["live_leases"]] == [live.holder]
    table = run_cli(capsys, "--db", store_url, "fsck")
    assert table.code == 0 and "expired_lease" in table.out and "--reap" in table.out

    reaped = json.loads(run_cli(capsys, "--db", store_url, "locks", "--reap", "--json").out)
    assert reaped["reaped"] == 1
    assert [(x["session_id"], x["holder"]) for x in reaped["leases"]] == [("chat:idle", live.holder)]
    code, doc = fsck(capsys, store_url)
    assert code == 0 and "expired_lease" not in {k for k, _ in warning_kinds(doc)}
    assert [x["holder"] for x in doc["live_leases"]] == [live.holder]  # the live lease is untouched

    store = open_store(store_url)
    try:
        again = store.acquire_lease("chat:inplace", "worker-new", 60)
        assert again.token == leaked.token + 1  # reaping kept the token
        assert store.release_lease(live) and store.release_lease(again)
    finally:
        store.close()
    assert run_cli(capsys, "--db", store_url, "locks", "--reap").out.startswith("released 0 expired")


def _damaged_copy(tmp_path, where: str) -> str:
    """A database of 400 messages with one page damaged: an index page's cells
    (``index``) or a table page's header (``header``)."""
    import sqlite3

    from persistence import open_store
    from protocol import Message

    path = str(tmp_path / f"{where}.db")
    with open_store(path) as store:
        store.create_session("s")
        store.append("s", [Message("user", f"secret text {i} " * 20) for i in range(400)])
    with sqlite3.connect(path) as conn:
        name = "sqlite_autoindex_messages_1" if where == "index" else "messages"
        pages = [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (name,))]
    with open(path, "r+b") as fh:
        page = pages[len(pages) // 2]
        fh.seek(4096 * page - 40 if where == "index" else 4096 * (page - 1))
        fh.write(b"\x01" * 8 if where == "index" else b"\x07" * 12)
    return path


@pytest.mark.parametrize("where", ["index", "header"])
def test_fsck_of_a_damaged_file_exits_1_and_shows_no_stored_text(capsys, tmp_path, where) -> None:
    path = _damaged_copy(tmp_path, where)
    result = run_cli(capsys, "--db", path, "fsck")
    assert result.code == 1, (result.out, result.err)
    assert "corrupt" in result.out
    assert "secret text" not in result.out + result.err and "Traceback" not in result.err
    as_json = run_cli(capsys, "--db", path, "fsck", "--format", "json")
    assert as_json.code == 1 and json.loads(as_json.out)["ok"] is False


def test_fsck_session_checks_only_those_lineages_in_one_process(capsys, tmp_path) -> None:
    import sqlite3

    from persistence import open_store
    from protocol import Message

    path = str(tmp_path / "many.db")
    with open_store(path) as store:
        for i in range(20):
            store.create_session(f"s{i}")
            store.append(f"s{i}", [Message("user", "q"), Message("assistant", "a")])
    with sqlite3.connect(path) as conn:  # damage one lineage: a seq gap in s7
        conn.execute("UPDATE messages SET seq = 9 WHERE session_id = 's7' AND seq = 2")
    clean = run_cli(capsys, "--db", path, "fsck", "--session", "s1", "--session", "s2", "--format", "json")
    doc = json.loads(clean.out)
    assert clean.code == 0 and doc["sessions_checked"] == 2 and doc["messages_checked"] == 4
    damaged = run_cli(capsys, "--db", path, "fsck", "--session", "s1", "--session", "s7", "--format", "json")
    assert damaged.code == 1 and [p["session_id"] for p in json.loads(damaged.out)["problems"]] == ["s7"]
    missing = run_cli(capsys, "--db", path, "fsck", "--session", "nope")
    assert missing.code == 2


def test_export_all_writes_every_conversation_in_one_pass(capsys, tmp_path) -> None:
    from persistence import open_store
    from protocol import Message

    path = str(tmp_path / "all.db")
    with open_store(path) as store:
        for i in range(3):
            store.create_session(f"c{i}")
            store.append(f"c{i}", [Message("user", f"q{i}"), Message("assistant", f"a{i}")])
    result = run_cli(capsys, "--db", path, "export", "--all")
    lines = [json.loads(line) for line in result.out.splitlines()]
    assert result.code == 0 and len(lines) == 6
    assert {(line["session_id"], line["content"]) for line in lines} == {
        (f"c{i}", text) for i in range(3) for text in (f"q{i}", f"a{i}")
    }
    assert run_cli(capsys, "--db", path, "export").code == 2  # one ID or --all
    assert run_cli(capsys, "--db", path, "export", "c1", "--all").code == 2


def _change_stored_text(url: str, old: str, new: str) -> None:
    """Change a message's text below the store, as a flipped byte on disk would: in
    the SQLite file's bytes, or (PostgreSQL, where the checksum column is computed
    on every write) with the column made a plain one first."""
    if url.startswith("postgresql"):
        from tests.pg import pg_rows

        pg_rows(url, "ALTER TABLE messages ALTER COLUMN checksum DROP EXPRESSION")
        pg_rows(url, "UPDATE messages SET content = replace(content, %s, %s)", (old, new))
        return
    with open(url, "rb") as f:
        data = f.read()
    assert data.count(old.encode()) == 1, "the text is in one place in the file"
    with open(url, "wb") as f:
        f.write(data.replace(old.encode(), new.encode()))


def test_a_row_whose_bytes_changed_is_corrupt_and_its_text_is_never_shown(capsys, store_url: str) -> None:
    store = open_store(store_url)
    try:
        for sid in ("a", "b"):
            store.create_session(sid)
        store.append("a", [Message("user", "hello"), Message("assistant", "the vault code is 4711")])
        store.append("b", Message("user", "untouched"))
    finally:
        store.close()
    code, doc = fsck(capsys, store_url)
    assert code == 0, doc
    _change_stored_text(store_url, "vault code is 4711", "vault code is 4712")  # one digit: valid JSON still
    code, doc = fsck(capsys, store_url)
    assert code == 1
    assert kinds(doc) == [("corrupt", "a")]
    assert "seqs 2" in doc["problems"][0]["detail"]
    assert "vault" not in json.dumps(doc)
    scoped = run_cli(capsys, "--db", store_url, "fsck", "--session", "b", "--format", "json")
    assert scoped.code == 0 and json.loads(scoped.out)["ok"] is True


def test_every_write_path_leaves_rows_whose_checksums_hold(capsys, store_url: str) -> None:
    """Appends (plain, keyed, with tool calls and meta), a compaction's summary and
    carried tail, a branch's copies and pruned rows all check clean."""
    ids = build_lineage_db(store_url)
    store = open_store(store_url)
    try:
        store.append(
            ids["child"],
            [
                Message(
                    "assistant",
                    "",
                    tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                ),
                Message("tool", "out", tool_call_id="c1", name="f", meta={"k": "é"}),
                Message("user", [{"type": "text", "text": "parts"}], key="k-1"),
            ],
        )
        store.branch(ids["child"], 3, "branched")
        assert store.prune_archive(older_than_s=0) > 0
    finally:
        store.close()
    code, doc = fsck(capsys, store_url)
    assert code == 0, doc["problems"]
    assert doc["messages_checked"] >= 15
    unchecked = "SELECT count(*) FROM messages WHERE checksum IS NULL AND state <> 'pruned'"
    assert _rows(store_url, unchecked) == [(0,)]  # every row written has its checksum


def _rows(url: str, query: str) -> list[tuple]:
    if url.startswith("postgresql"):
        from tests.pg import pg_rows

        return pg_rows(url, query)
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(url)) as conn:
        return conn.execute(query).fetchall()
