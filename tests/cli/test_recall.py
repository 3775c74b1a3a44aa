"""``search`` and ``show --compaction`` on a prepared database, on both backends."""

from __future__ import annotations

import json

import pytest

from persistence import open_store
from tests.cli.helpers import build_lineage_db, run_cli

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def db(store_url: str) -> tuple[str, dict[str, str]]:
    return store_url, build_lineage_db(store_url)


def test_search_table_and_json(capsys, db) -> None:
    url, ids = db
    table = run_cli(capsys, "--db", url, "search", "hello")
    assert table.code == 0, table.err
    assert "2 hit(s) for 'hello'" in table.out and "[hello]" in table.out and "archive" in table.out
    doc = json.loads(run_cli(capsys, "--db", url, "--json", "search", "hello", "--session", ids["child"]).out)
    assert doc["query"] == "hello"
    assert sorted((h["session_id"], h["archived"]) for h in doc["hits"]) == [(ids["root"], True), (ids["child"], False)]
    live = json.loads(run_cli(capsys, "--db", url, "--json", "search", "hello", "--live-only").out)
    assert [h["session_id"] for h in live["hits"]] == [ids["child"]]  # "summary of hello"
    assert json.loads(run_cli(capsys, "--db", url, "--json", "search", "m1", "--source", "discord").out)["hits"] == []
    one = json.loads(run_cli(capsys, "--db", url, "--json", "search", "m1", "--source", "web").out)["hits"]
    assert [(h["session_id"], h["seq"]) for h in one] == [(ids["inplace"], 2)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["search", "!!!"], "at least one letter or digit"),
        (["search", "x", "--session", "nope"], "not found"),
        (["search", "x", "--limit", "0"], "must be from 1 to 1000"),
    ],
)
def test_search_refusals_exit_2(capsys, db, argv, message) -> None:
    url, _ = db
    result = run_cli(capsys, "--db", url, *argv)
    assert result.code == 2 and message in result.err, result.err


def test_show_compaction_lists_replaced_summary_and_carried(capsys, db) -> None:
    url, ids = db
    store = open_store(url)
    try:
        [record] = store.compactions(ids["root"])
    finally:
        store.close()
    table = run_cli(capsys, "--db", url, "show", "--compaction", str(record.id))
    assert table.code == 0, table.err
    assert f"compaction {record.id} of {ids['root']} into {ids['child']}" in table.out
    assert "replaced: 3 message(s)" in table.out and "summary: 2 message(s)" in table.out
    assert "carried: 1 message(s)" in table.out and "[tag] brackets" in table.out
    doc = json.loads(run_cli(capsys, "--db", url, "--json", "show", "--compaction", str(record.id)).out)
    assert doc["complete"] is True and doc["compaction"]["id"] == record.id
    assert [m["content"] for m in doc["replaced"]] == ["be brief", "hello", "hi"]
    assert [m["content"] for m in doc["summary"]] == ["be brief", "summary of hello"]
    assert [(m["content"], m["session_id"]) for m in doc["carried"]] == [("[tag] brackets", ids["child"])]
    for argv, message in [
        (["show", "--compaction", "999999"], "compaction 999999 not found"),
        (["show"], "a session ID or --compaction CID"),
        (["show", ids["root"], "--compaction", str(record.id)], "a session ID or --compaction CID"),
    ]:
        result = run_cli(capsys, "--db", url, *argv)
        assert result.code == 2 and message in result.err, (argv, result.err)


def test_usage_table_and_json_sum_messages_and_compactions(capsys, store_url) -> None:
    from protocol import Message, Usage

    store = open_store(store_url)
    try:
        store.create_session("u", source="web")
        store.append("u", [Message("user", "q"), Message("assistant", "a", usage=Usage(40, 2, "big"))])
        lease = store.acquire_lease("u", "cli-test", 30)
        store.commit_compaction(
            lease, watermark=2, compacted=[Message("user", "sum")], mode="in_place", usage=Usage(9, 1, "small")
        )
        store.create_session("other", source="discord")
        store.append("other", Message("assistant", "b", usage=Usage(5, 5)))
    finally:
        store.close()
    table = run_cli(capsys, "--db", store_url, "usage", "u")
    assert table.code == 0, table.err
    assert "usage of lineage of u: 49 input + 3 output = 52 tokens; compactions 10" in table.out
    assert "big" in table.out and "small" in table.out and "(none)" not in table.out
    doc = json.loads(run_cli(capsys, "--db", store_url, "--json", "usage").out)["usage"]
    assert (doc["input_tokens"], doc["total_tokens"], doc["compactions"]["input_tokens"]) == (54, 62, 9)
    assert sorted(doc["by_model"]) == ["", "big", "small"]
    web = json.loads(run_cli(capsys, "--db", store_url, "--json", "usage", "--source", "discord").out)["usage"]
    assert web["total_tokens"] == 10
    missing = run_cli(capsys, "--db", store_url, "usage", "nope")
    assert missing.code == 2 and "not found" in missing.err
