"""The data lifecycle commands as a user runs them (subprocesses), on both backends:
export, delete, prune, and the filters and paging of sessions."""

from __future__ import annotations

import json

import pytest

from persistence import open_store
from protocol import Message
from tests.cli.helpers import build_lineage_db, run_cli, run_piped
from tests.persistence.contract.db import execute, snapshot

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def db(store_url: str) -> tuple[str, dict[str, str]]:
    ids = build_lineage_db(store_url)
    store = open_store(store_url)
    try:
        store.append(ids["child"], Message("assistant", "retracted later"))
        store.retract(ids["child"])
        store.update_metadata(ids["root"], {"user": "u1", "n": 42})
        store.update_metadata(ids["inplace"], {"user": "u2", "n": "42"})
    finally:
        store.close()
    return store_url, ids


def _lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def _assert_usage_error(result, *words: str) -> None:
    assert result.code == 2, result
    assert result.out == ""
    assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.err, result.err
    for word in words:
        assert word in result.err, (word, result.err)


# -- export -------------------------------------------------------------------------


def test_export_writes_the_live_transcript_of_the_live_tip_as_json_lines(db):
    url, ids = db
    store = open_store(url)
    try:
        expected = [m.to_dict() for m in store.transcript(ids["child"])]
    finally:
        store.close()
    for name in ("root", "child"):  # an old id resolves to the tip, as a gateway addresses it
        result = run_piped("--db", url, "export", ids[name])
        assert result.code == 0, result.err
        assert _lines(result.out) == expected
    assert result.out.endswith("\n") and result.err == ""


def test_export_archive_and_lineage_tag_every_row(db):
    url, ids = db
    store = open_store(url)
    try:
        tip_rows = sorted(store.transcript(ids["child"]) + store.archive(ids["child"]), key=lambda m: m.seq)
        root_rows = store.archive(ids["root"])
    finally:
        store.close()
    archive = _lines(run_piped("--db", url, "export", ids["child"], "--archive").out)
    assert [(r["session_id"], r["seq"], r["state"]) for r in archive] == [
        (m.session_id, m.seq, m.state) for m in tip_rows
    ]
    assert "retracted" in {r["state"] for r in archive}
    assert [{k: v for k, v in r.items() if k not in ("session_id", "seq", "state")} for r in archive] == [
        m.to_dict() for m in tip_rows
    ]
    lineage = _lines(run_piped("--db", url, "export", ids["child"], "--lineage").out)
    assert [(r["session_id"], r["seq"]) for r in lineage] == [
        (m.session_id, m.seq) for m in root_rows + tip_rows
    ]  # oldest session first, seq order


def test_export_of_an_unknown_id_is_a_usage_error(db):
    url, _ = db
    _assert_usage_error(run_piped("--db", url, "export", "chat:missing"), "chat:missing")


# -- delete -------------------------------------------------------------------------


def test_delete_without_yes_says_what_and_erases_nothing(db, backend):
    url, ids = db
    before = snapshot(backend, url)
    result = run_piped("--db", url, "delete", ids["child"])
    _assert_usage_error(result, "--yes", ids["root"], ids["child"], "2 session(s)")
    assert snapshot(backend, url) == before


def test_delete_yes_erases_the_lineage_only(db):
    url, ids = db
    store = open_store(url)
    try:
        count = sum(len(store.transcript(s)) + len(store.archive(s)) for s in (ids["root"], ids["child"]))
    finally:
        store.close()
    result = run_piped("--db", url, "delete", ids["root"], "--yes", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == {
        "deleted": ids["root"],
        "sessions": [ids["root"], ids["child"]],
        "messages": count,
    }
    listed = json.loads(run_piped("--db", url, "sessions", "--json").out)
    assert {s["id"] for s in listed["sessions"]} == {ids["inplace"], ids["idle"]}
    _assert_usage_error(run_piped("--db", url, "delete", ids["root"], "--yes"), ids["root"])


# -- prune --------------------------------------------------------------------------


def test_prune_keeps_recent_archives_and_prunes_old_ones(db, backend):
    url, ids = db
    recent = run_piped("--db", url, "prune", "--older-than", "30d", "--json")
    assert recent.code == 0, recent.err
    assert json.loads(recent.out)["pruned"] == 0
    execute(
        backend,
        url,
        f"UPDATE messages SET archived_at = archived_at - {31 * 86400} WHERE session_id = '{ids['inplace']}'",
    )
    old = run_piped("--db", url, "prune", "--older-than", "30d")
    assert old.code == 0 and "pruned 4 archived message(s)" in old.out, old
    scoped = run_piped("--db", url, "prune", "--older-than", "0", "--session", ids["child"], "--json")
    store = open_store(url)
    try:
        lineage_archive = store.archive(ids["root"]) + store.archive(ids["child"])
        assert json.loads(scoped.out)["pruned"] == len(lineage_archive)
        assert {m.state for m in lineage_archive} == {"pruned"}
    finally:
        store.close()
    assert run_piped("--db", url, "fsck").code == 0  # seqs stay 1..N


@pytest.mark.parametrize("duration", ["-1d", "30x", "d", "", "1e400", "nan", "\u0663d", "\uff13h"])
def test_prune_rejects_a_bad_duration_and_writes_nothing(db, backend, duration):
    url, _ = db
    before = snapshot(backend, url)
    _assert_usage_error(run_piped("--db", url, "prune", f"--older-than={duration}"), "--older-than")
    assert snapshot(backend, url) == before


@pytest.mark.parametrize(
    "duration, seconds",
    [("90m", 5400), ("12h", 43200), ("30d", 2592000), ("45s", 45), ("2w", 1209600), ("0", 0), ("1.5h", 5400)],
)
def test_prune_duration_units(db, duration, seconds):
    url, _ = db
    result = run_piped("--db", url, "prune", "--older-than", duration, "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["older_than_s"] == seconds


# -- sessions filters -----------------------------------------------------------------


def _ids(result) -> list[str]:
    assert result.code == 0, result.err
    return [s["id"] for s in json.loads(result.out)["sessions"]]


def test_sessions_source_and_metadata_filters(db):
    url, ids = db
    assert set(_ids(run_piped("--db", url, "sessions", "--source", "web", "--json"))) == {ids["inplace"]}
    assert _ids(run_piped("--db", url, "sessions", "--meta", "n=42", "--json")) == [ids["root"]]
    assert _ids(run_piped("--db", url, "sessions", "--meta", 'n="42"', "--json")) == [ids["inplace"]]
    assert _ids(run_piped("--db", url, "sessions", "--meta", "user=u2", "--meta", 'n="42"', "--json")) == [
        ids["inplace"]
    ]
    assert _ids(run_piped("--db", url, "sessions", "--meta", "user=nobody", "--json")) == []
    _assert_usage_error(run_piped("--db", url, "sessions", "--meta", "novalue"), "KEY=VALUE")


def test_sessions_pages_with_after(db):
    url, _ = db
    everything = _ids(run_piped("--db", url, "sessions", "--json"))
    assert len(everything) == 4
    seen, after = [], None
    while True:
        argv = ["--db", url, "sessions", "--limit", "1", "--json"] + (["--after", after] if after else [])
        doc = json.loads(run_piped(*argv).out)
        seen += [s["id"] for s in doc["sessions"]]
        if not doc["more"]:
            break
        after = doc["next_after"]
    assert seen == everything
    _assert_usage_error(run_piped("--db", url, "sessions", "--after", "chat:missing"), "chat:missing")


def test_expire_lists_with_dry_run_then_erases_idle_lineages(capsys, store_url, backend) -> None:
    ids = build_lineage_db(store_url)
    execute(backend, store_url, "UPDATE sessions SET created_at = created_at - 200000 WHERE id <> 'chat:idle'")
    execute(backend, store_url, "UPDATE messages SET created_at = created_at - 200000")
    dry = run_cli(capsys, "--db", store_url, "--json", "expire", "--idle", "2d", "--dry-run")
    assert dry.code == 0, dry.err
    assert json.loads(dry.out) == {"dry_run": True, "idle_for_s": 172800.0, "lineages": ["chat:inplace", "chat:root"]}
    only = run_cli(capsys, "--db", store_url, "expire", "--idle", "2d", "--source", "web")
    assert only.code == 0 and "erased 1 lineage(s) idle for at least 2d" in only.out and "chat:inplace" in only.out
    rest = json.loads(run_cli(capsys, "--db", store_url, "--json", "expire", "--idle", "2d").out)
    assert rest["lineages"] == [ids["root"]]
    left = json.loads(run_cli(capsys, "--db", store_url, "--json", "sessions").out)["sessions"]
    assert [s["id"] for s in left] == [ids["idle"]]
    bad = run_cli(capsys, "--db", store_url, "expire", "--idle=-1d")
    assert bad.code == 2 and "--idle must be a duration" in bad.err


def test_branch_starts_a_conversation_and_lineage_tells_it_from_a_fork(capsys, store_url) -> None:
    ids = build_lineage_db(store_url)
    made = run_cli(capsys, "--db", store_url, "--json", "branch", ids["child"], "--at", "1", "--new", "chat:alt")
    assert made.code == 0, made.err
    doc = json.loads(made.out)
    assert (doc["id"], doc["branch_of"], doc["parent_session_id"], doc["live_messages"]) == (
        "chat:alt",
        [ids["child"], 1],
        None,
        1,
    )
    root = json.loads(run_cli(capsys, "--db", store_url, "--json", "lineage", ids["root"]).out)
    assert root["forked"] is False and root["count"] == 2  # the branch is no continuation
    assert root["branches"] == [{"id": "chat:alt", "from": ids["child"], "at_seq": 1}]
    alt = run_cli(capsys, "--db", store_url, "lineage", "chat:alt")
    assert f"a branch of {ids['child']} at seq 1: a conversation of its own" in alt.out
    assert run_cli(capsys, "--db", store_url, "fsck").code == 0
    again = run_cli(capsys, "--db", store_url, "branch", ids["child"], "--at", "1", "--new", "chat:alt")
    assert again.code == 2 and "already exists" in again.err
    bad = run_cli(capsys, "--db", store_url, "branch", ids["child"], "--at", "99", "--new", "chat:x")
    assert bad.code == 2 and "not a live message" in bad.err
