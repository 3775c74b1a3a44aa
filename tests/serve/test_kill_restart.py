"""kill -9 of the server under load, and a restart on the same port, several times:
client processes append with ``Idempotency-Key`` and retry every message until it is
acknowledged. The ledger: every acknowledged message is stored as it was answered,
nothing is lost and nothing is stored twice; the longest error window a client saw is
printed and stays under the configured lease plus the time a restart took.

``SESSION_ACTORS_SERVE_KILLS=N`` kills N times (default 3).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from persistence import open_store

from .client import Server, start_server, token_file

KILLS = int(os.environ.get("SESSION_ACTORS_SERVE_KILLS", "3"))
CLIENTS, SESSIONS, APPENDS = 3, 2, 50
LEASE_S = 3.0
#: Rows the clients must store between two kills (progress, not a timer).
PROGRESS = 20
SLACK_S = 2.0  # a client's retry pause and a loaded machine's scheduling


def _stored(store, sids: list[str]) -> int:
    return sum(len(store.transcript(sid)) for sid in sids if store.get_session(sid) is not None)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_kill_9_and_restart_under_load_loses_nothing_and_stores_nothing_twice(backend, tmp_path, request):
    db = request.getfixturevalue("pg_url") if backend == "postgres" else str(tmp_path / "state.db")
    path = tmp_path / "tokens.txt"
    secrets = token_file(path, {"bot": ("read,write", None)})
    options = ("--lease-ttl-s", str(LEASE_S), "--drain", "5")
    server = start_server(db, path, *options, tokens_by_name=secrets)
    port = server.port
    clients = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.serve.chaos_client", str(port), secrets["bot"], f"c{n}", str(SESSIONS)]
            + [str(APPENDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(CLIENTS)
    ]
    sids = [f"c{n}/{s}" for n in range(CLIENTS) for s in range(SESSIONS)]
    store = open_store(db)
    restarts: list[float] = []
    try:
        for _ in range(KILLS):
            server = _kill_after_progress(server, store, sids, clients, restarts, db, path, options, secrets, port)
        results = [_finished(client) for client in clients]
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
                client.wait(30)
        code = server.stop()
        ledger = _ledger(store, sids)
        store.close()
    assert code == 0, "".join(server.stderr)
    assert len(restarts) == KILLS, "the clients finished before every kill: raise APPENDS"
    _check_ledger(ledger, results)
    longest = max(r["longest_window_s"] for r in results)
    failures = sum(r["failures"] for r in results)
    sys.stderr.write(
        f"\n[{backend}] {KILLS} kill -9: restarts took {max(restarts):.2f}s at most; {failures} failed attempts; "
        f"longest client error window {longest:.2f}s (lease {LEASE_S:g}s)\n"
    )
    print(f"[{backend}] longest client error window after kill -9: {longest:.2f}s")
    assert longest <= LEASE_S + max(restarts) + SLACK_S


def _kill_after_progress(server, store, sids, clients, restarts, db, path, options, secrets, port) -> Server:
    began = _stored(store, sids)
    deadline = time.monotonic() + 120
    while _stored(store, sids) < began + PROGRESS:
        if all(c.poll() is not None for c in clients) or time.monotonic() > deadline:
            return server  # the test fails on the count of restarts (or on the clients' output)
        time.sleep(0.02)
    killed_at = time.monotonic()
    server.process.kill()
    server.process.wait(30)
    server.stop()
    fresh = start_server(db, path, *options, "--port", str(port), tokens_by_name=secrets)
    restarts.append(time.monotonic() - killed_at)
    return fresh


def _finished(client: subprocess.Popen[str]) -> dict:
    out, err = client.communicate(timeout=300)
    assert client.returncode == 0, err[-3000:]
    return json.loads(out)


def _ledger(store, sids: list[str]) -> dict[str, list]:
    """Every stored message (live or archived) by its key: where it is."""
    by_key: dict[str, list] = {}
    for sid in sids:
        for m in store.transcript(sid) + store.archive(sid):
            by_key.setdefault(m.key, []).append([sid, m.key, m.seq, m.id])
    return by_key


def _check_ledger(by_key: dict[str, list], results: list[dict]) -> None:
    twice = {key: found for key, found in by_key.items() if len(found) > 1}
    assert not twice, f"stored twice: {twice}"  # 0 duplicated
    acks = [ack for result in results for ack in result["acks"]]
    assert len(acks) == len(by_key) == CLIENTS * SESSIONS * APPENDS
    for ack in acks:
        assert by_key[ack[1]] == [ack], ack  # 0 lost: stored exactly as acknowledged
