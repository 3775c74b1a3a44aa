"""simulate --chaos: real SIGKILLs and SIGSTOPs of worker processes, and still 0 violations."""

from __future__ import annotations

import json
import secrets
import sqlite3
from contextlib import closing

import pytest

from actors.simulate._chaos import run_chaos
from actors.simulate._chaos_worker import ledger_acks
from actors.simulate._check import check_run
from actors.simulate._config import WorkerConfig, session_ids
from actors.simulate._ledger import Ledger
from persistence import open_store
from tests.cli.helpers import run_cli

from .test_simulate import assert_clean, report_of

SMALL = ["--sessions", "4", "--turns", "6", "--threads", "3", "--seed", "11"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--chaos"],  # one process: nothing to kill and restart
        ["--chaos", "--processes", "2", "--naive"],
        ["--processes", "2", "--faults", "3"],  # --faults without --chaos
        ["--chaos", "--processes", "2", "--faults", "1"],  # not one of each kind
    ],
)
def test_bad_chaos_options_exit_2_with_one_line(capsys, tmp_path, argv) -> None:
    result = run_cli(capsys, "simulate", "--db", str(tmp_path / "x.db"), *argv)
    assert result.code == 2
    assert result.out == "" and len(result.err.strip().splitlines()) == 1, result.err
    assert "Traceback" not in result.err


@pytest.mark.timeout(180)
def test_chaos_run_kills_and_freezes_and_loses_nothing(capsys, store_url: str) -> None:
    result = run_cli(
        capsys, "--db", store_url, "simulate", "--processes", "2", "--chaos", "--faults", "4", "--json", *SMALL
    )
    doc = report_of(result)
    assert result.code == 0, doc["examples"]
    assert_clean(doc)
    chaos = doc["chaos"]
    assert chaos["kills"] >= 1 and chaos["freezes"] >= 1
    assert chaos["kills"] + chaos["freezes"] >= 4
    assert chaos["restarts"] >= 1
    assert chaos["kills_by_moment"].get("mid_commit", 0) >= 1  # a restarted worker died at a commit point
    assert doc["turns"] >= 4 * 6  # every turn ran (killed ones again), maybe more
    store = open_store(store_url)
    try:
        now = store.now()
        assert [lease for lease in store.leases() if lease.expires_at > now] == []
    finally:
        store.close()


@pytest.mark.timeout(180)
def test_a_tiny_workload_keeps_going_until_every_fault_happened(capsys, tmp_path) -> None:
    result = run_cli(
        capsys,
        "--db",
        str(tmp_path / "tiny.db"),
        "simulate",
        "--processes",
        "2",
        "--chaos",
        "--faults",
        "3",
        "--json",
        "--sessions",
        "1",
        "--turns",
        "1",
        "--threads",
        "1",
    )
    doc = report_of(result)
    assert result.code == 0, doc["examples"]
    assert_clean(doc)
    assert doc["chaos"]["kills"] >= 1 and doc["chaos"]["freezes"] >= 1
    assert doc["chaos"]["kills"] + doc["chaos"]["freezes"] >= 3
    assert doc["chaos"]["kills_by_moment"].get("mid_commit", 0) >= 1
    assert doc["turns"] > 1  # kept going


def test_text_report_says_how_many_kills_and_freezes(capsys, tmp_path) -> None:
    result = run_cli(
        capsys,
        "--db",
        str(tmp_path / "t.db"),
        "simulate",
        "--processes",
        "2",
        "--chaos",
        "--faults",
        "2",
        "--sessions",
        "2",
        "--turns",
        "2",
        "--threads",
        "2",
    )
    assert result.code == 0, result.out
    line = next(line for line in result.out.splitlines() if line.startswith("chaos:"))
    assert " kill" in line and " past the lease TTL" in line and "restart" in line


@pytest.mark.timeout(180)
def test_the_check_holds_the_store_to_every_ledgered_ack(tmp_path) -> None:
    """The acks a chaos run reports come from the workers' ledgers, and the check uses
    them: erase one acknowledged row behind the store's back and it is counted lost."""
    db = str(tmp_path / "sim.db")
    base = WorkerConfig(
        db=db,
        prefix=f"sim-{secrets.token_hex(3)}-",
        sessions=2,
        turns=3,
        threads=2,
        seed=5,
        workers=2,
        max_tokens=300,
        target_tokens=100,
    )
    roots = session_ids(base.prefix, base.sessions)
    store = open_store(db)
    for root in roots:
        store.create_session(root, source="sim")
    store.close()
    workdir = tmp_path / "chaos"
    workdir.mkdir()
    result, stats = run_chaos(base, 2, 2, workdir, lambda n: None)
    assert stats.kills >= 1 and stats.freezes >= 1
    assert len(result.acks) >= 2 * 3 * 2
    store = open_store(db)
    try:
        assert check_run(store, base.prefix, roots, result.acks).lost_messages == 0
        victim = result.acks[len(result.acks) // 2]
        with closing(sqlite3.connect(db)) as conn, conn:
            conn.execute("DELETE FROM messages WHERE id = ?", (victim.id,))
        assert check_run(store, base.prefix, roots, result.acks).lost_messages == 1
    finally:
        store.close()


def test_ledger_reader_skips_a_torn_last_line(tmp_path) -> None:
    with Ledger(tmp_path / "w.ledger") as ledger:
        ledger.record("acks", "root-1", [[1, "hello"], [2, "world"]])
        ledger.record("outcome", "compacted")
    with open(tmp_path / "w.ledger", "ab") as fh:
        fh.write(b'["acks","root-1",[[3,"torn')  # killed in the middle of a write
    acks = list(ledger_acks([tmp_path / "w.ledger"]))
    assert [(a.root, a.id, a.content) for a in acks] == [("root-1", 1, "hello"), ("root-1", 2, "world")]
    assert json.loads((tmp_path / "w.ledger").read_text().splitlines()[0])[0] == "acks"


@pytest.mark.timeout(180)
def test_unrouted_chaos_run_splits_no_turn_and_duplicates_nothing(capsys, store_url: str) -> None:
    result = run_cli(
        capsys,
        "--db",
        store_url,
        "simulate",
        "--processes",
        "3",
        "--unrouted",
        "--chaos",
        "--faults",
        "4",
        "--json",
        *SMALL,
    )
    doc = report_of(result)
    assert result.code == 0, doc["examples"]
    assert_clean(doc)
    assert doc["violations"]["turns_split"] == 0 and doc["violations"]["duplicated_copies"] == 0
    assert doc["chaos"]["kills"] + doc["chaos"]["freezes"] >= 4
