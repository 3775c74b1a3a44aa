"""simulate: zero violations through actors (threads, and two processes); forks when naive."""

from __future__ import annotations

import json

import pytest

from persistence import open_store
from tests.cli.helpers import run_cli

SMALL = ["--sessions", "4", "--turns", "8", "--threads", "4", "--seed", "7"]


def report_of(result) -> dict:
    assert result.err == "" or "Traceback" not in result.err
    return json.loads(result.out)


def assert_clean(doc: dict) -> None:
    assert doc["ok"] is True, doc["examples"]
    assert all(count == 0 for count in doc["violations"].values()), doc["violations"]
    assert set(doc["violations"]) >= {
        "forks",
        "lost_messages",
        "leaked_leases",
        "seq_gaps",
        "orphan_writes",
        "duplicated_copies",
        "errors",
        "turns_split",
        "tool_results_separated",
    }


@pytest.mark.timeout(60)
def test_simulate_threads_exits_0_with_no_violations(capsys, tmp_path) -> None:
    db = str(tmp_path / "sim.db")  # missing: simulate is the one command that creates it
    result = run_cli(capsys, "simulate", "--db", db, "--json", *SMALL, "--max-tokens", "300")
    assert result.code == 0, result.out
    doc = report_of(result)
    assert_clean(doc)
    assert doc["mode"] == "actors" and doc["turns"] == 4 * 8
    assert doc["messages_acknowledged"] >= 4 * 8 * 2 + 4  # user + reply per turn, system prompts
    assert doc["compactions"]["committed"] > 0  # the low threshold made compaction happen
    assert doc["throughput"]["messages_per_s"] > 0

    # The run is left behind for the other commands, and it is consistent.
    fsck = run_cli(capsys, "--db", db, "fsck", "--json")
    assert fsck.code == 0 and json.loads(fsck.out)["ok"] is True
    store = open_store(db)
    try:
        assert store.leases() == []  # every lease was released
        ids = [s.id for s in store.sessions()]
        assert all(sid.startswith(doc["run_id"]) for sid in ids)
    finally:
        store.close()


@pytest.mark.timeout(90)
def test_simulate_two_processes_exits_0(capsys, store_url: str) -> None:
    db = store_url  # both backends: a missing SQLite file, or an empty PostgreSQL schema
    result = run_cli(capsys, "--db", db, "simulate", "--processes", "2", "--json", *SMALL)
    assert result.code == 0, result.out
    doc = report_of(result)
    assert_clean(doc)
    assert doc["processes"] == 2 and doc["turns"] == 4 * 8  # the turns were split, not lost
    store = open_store(db)
    try:
        holders = {r.holder.split(":", 1)[0] for s in store.sessions() for r in store.compactions(s.id)}
    finally:
        store.close()
    assert holders <= {"sim-w0", "sim-w1"} and holders  # compactions came from the workers


@pytest.mark.timeout(60)
def test_simulate_naive_forks_and_exits_1(capsys, tmp_path) -> None:
    db = str(tmp_path / "naive.db")
    result = run_cli(capsys, "simulate", "--naive", "--db", db, "--json", *SMALL)
    assert result.code == 1
    doc = report_of(result)
    assert doc["mode"] == "naive" and doc["ok"] is False
    assert doc["violations"]["forks"] > 0
    fsck = run_cli(capsys, "--db", db, "fsck", "--json")  # fsck agrees: the store is forked
    assert fsck.code == 1 and json.loads(fsck.out)["counts"]["fork"] == doc["violations"]["forks"]


@pytest.mark.timeout(60)
def test_simulate_table_output_and_bad_sizes(capsys, tmp_path) -> None:
    db = str(tmp_path / "sim.db")
    result = run_cli(capsys, "simulate", "--db", db, "--sessions", "2", "--turns", "3", "--threads", "2", "--seed", "1")
    assert result.code == 0
    assert "forks" in result.out and "lost messages" in result.out and "msg/s" in result.out
    bad = run_cli(capsys, "simulate", "--db", db, "--threads", "0")
    assert bad.code == 2 and len(bad.err.strip().splitlines()) == 1


@pytest.mark.timeout(60)
def test_simulate_with_the_llm_compressor(capsys, tmp_path) -> None:
    import threading

    from tests.llm_server import FakeLLM

    server = FakeLLM()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        result = run_cli(
            capsys,
            "simulate",
            "--db",
            str(tmp_path / "llm.db"),
            "--json",
            "--sessions",
            "2",
            "--turns",
            "6",
            "--threads",
            "2",
            "--seed",
            "3",
            "--max-tokens",
            "200",
            "--compressor",
            "llm",
            "--llm-base-url",
            server.base_url,
            "--llm-model",
            "tiny",
        )
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert result.code == 0, result.out
    doc = report_of(result)
    assert_clean(doc)
    assert doc["compactions"]["committed"] > 0 and len(server.requests) > 0


@pytest.mark.timeout(120)
def test_simulate_unrouted_keeps_turns_whole_and_retries_store_once(capsys, store_url: str) -> None:
    result = run_cli(capsys, "--db", store_url, "simulate", "--processes", "3", "--unrouted", "--json", *SMALL)
    assert result.code == 0, result.out
    doc = report_of(result)
    assert_clean(doc)  # turns split and duplicated copies included
    assert doc["unrouted"] is True and doc["processes"] == 3 and doc["turns"] == 4 * 8
    store = open_store(store_url)
    try:
        rows = [m for s in store.sessions() for m in [*store.transcript(s.id), *store.archive(s.id)]]
    finally:
        store.close()
    workers_of: dict[str, set[str]] = {}
    for m in rows:  # a turn's tag: "<root> w<worker> t<turn> <nonce>"
        if "turn" in m.meta:
            root, worker = m.meta["turn"].split()[:2]
            workers_of.setdefault(root, set()).add(worker)
    assert len(workers_of) == 4 and all(len(w) >= 2 for w in workers_of.values()), workers_of  # unrouted
    assert any(m.key for m in rows)  # the asks carry keys


@pytest.mark.timeout(120)
def test_ctrl_c_of_a_multi_process_run_prints_no_traceback(tmp_path) -> None:
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(  # its own process group, as a terminal's foreground job
        [
            sys.executable,
            "-m",
            "actors.cli",
            "--db",
            str(tmp_path / "int.db"),
            "simulate",
            "--processes",
            "2",
            "--sessions",
            "20",
            "--turns",
            "400",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # the workers are running once the bar moves
        if line.startswith("simulating:"):
            break
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole group
    rest = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(60) == 130
    assert "Traceback" not in rest and "interrupted" in rest
