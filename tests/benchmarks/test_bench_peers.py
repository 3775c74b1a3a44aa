"""``python -m tests.benchmarks peers``: the session-actors rows at a tiny size (no peer is
installed by the tests), and the checker's counting on conversations made by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.peers.compaction import cut, summary
from tests.benchmarks.peers.workload import counts, erased, make_plan, tags

ROOT = Path(__file__).resolve().parents[2]


def turn(ask: int) -> list[str]:
    return [f"message {tag}" for tag in tags(ask)]


def test_a_whole_turn_of_every_ask_counts_nothing():
    acked = [("s", tag) for tag in tags(1) + tags(2)]
    assert counts({"s": turn(1) + turn(2)}, acked) == {"lost": 0, "duplicated": 0, "split": 0}


def test_interleaved_turns_count_as_split():
    one, two = turn(1), turn(2)
    conversation = one[:2] + two + one[2:]  # ask 2's turn lands inside ask 1's
    assert counts({"s": conversation}, [])["split"] == 1


def test_a_redelivered_ask_stored_twice_is_a_duplicate_and_an_unstored_ack_is_lost():
    conversation = turn(1) + turn(1) + ["message ask-2:note"]
    acked = [("s", "ask-1:ask"), ("s", "ask-3:ask"), ("t", "ask-2:note")]  # ask-3 nowhere; ask-2's note in "s" only
    assert counts({"s": conversation, "t": []}, acked) == {"lost": 2, "duplicated": 1, "split": 0}


def test_the_plan_redelivers_about_a_tenth_of_the_asks_to_other_workers():
    plan = make_plan(workers=4, sessions=32, asks=120, seed=46)
    events = [e for share in plan["workers"] for e in share]
    asks = [e["ask"] for e in events]
    redelivered = len(asks) - len(set(asks))
    assert sorted(set(asks)) == list(range(480)) and 24 <= redelivered <= 80
    assert {e["session"] for e in events} <= set(plan["sessions"]) and len(plan["sessions"]) == 32


@pytest.mark.timeout(300)
def test_the_session_actors_rows_run_at_a_tiny_size():
    out = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks", "peers", "--rounds", "1", "--workers", "2", "--sessions", "2"]
        + ["--asks", "6", "--peers", "session-actors,session-actors-no-turns"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=True,
    ).stdout
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in out.splitlines() if line.startswith("| ")}
    turns_on = [cell.strip() for cell in rows["session-actors, turns on"]]
    assert turns_on[:6] == ["0"] * 6 and turns_on[8] == "1.00x", out  # lost .. failed; rate, range, ratio
    assert "session-actors, turns off" in rows


def test_a_compaction_loses_what_its_summary_does_not_list():
    conversation = turn(1) + turn(2) + ["message ask-3:note"]
    at = cut(["user", "assistant", "tool", "assistant"] * 6 + ["assistant"] * 2)
    assert at == 16  # the last user ask that keeps a tail of at least 8
    acked = [("s", tag) for tag in tags(1) + tags(2) + ["ask-3:note"]]
    listed = [summary(conversation[:4])] + conversation[4:]  # turn 1 summarized
    assert counts({"s": listed}, acked)["lost"] == 0
    unlisted = [summary(conversation[:3])] + conversation[4:]  # turn 1's answer dropped, not listed
    assert counts({"s": unlisted}, acked)["lost"] == 1
    assert erased({"s": unlisted}, {"s": conversation[:4]}, acked) == 0  # archived: lost from the live only
    assert erased({"s": unlisted}, {}, acked) == 1


def row_cells(out: str, label: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.split("|")[2:-1]]


@pytest.mark.timeout(300)
def test_the_compaction_mode_compacts_session_actors_and_loses_nothing():
    out = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks", "peers", "--compaction", "--rounds", "1", "--workers", "2"]
        + ["--sessions", "2", "--asks", "30", "--peers", "session-actors,langgraph"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=True,
    ).stdout
    lost, erased, compactions, errors, failed = row_cells(out, "session-actors, turns on")[:5]
    assert (lost, erased, errors, failed) == ("0", "0", "0", "0") and int(compactions) >= 4, out
    assert row_cells(out, "LangGraph SqliteSaver") == ["n/a"] * 9 and "n/a: LangGraph SqliteSaver: " in out


@pytest.mark.timeout(300)
def test_the_kill_mode_reports_the_stall_of_a_dead_holders_session():
    out = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks", "peers", "--kill", "--rounds", "1", "--peers", "session-actors"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=True,
    ).stdout
    row = next(line for line in out.splitlines() if line.startswith("| session-actors, turns on"))
    assert float(row.split("|")[2]) >= 0, out
