"""Many sessions at once through a gateway in another process, acknowledgements lost
and retried on the same keys: nothing lost, nothing stored twice (checked in the
database itself); and a SIGTERM that lets an open turn's held append go in."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading

from persistence import open_store

from .client import Server

SESSIONS, APPENDS = 200, 20


def test_200_sessions_x_20_appends_with_lost_acks_retried_lose_nothing_and_store_nothing_twice(server, tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.serve.load_client",
            str(server.port),
            server.tokens["bot"],
            str(SESSIONS),
            str(APPENDS),
            "16",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    acks = json.loads(done.stdout)
    assert len(acks) == SESSIONS and all(len(a) == APPENDS for a in acks.values())
    db = sqlite3.connect(tmp_path / "state.db")
    try:
        rows = db.execute("SELECT session_id, key, seq, id FROM messages WHERE session_id LIKE 'load:%'").fetchall()
    finally:
        db.close()
    stored = {}
    for sid, key, seq, row_id in rows:
        assert (sid, key) not in stored, f"{key} stored twice"
        stored[sid, key] = [key, seq, row_id]
    assert len(rows) == SESSIONS * APPENDS  # 0 duplicated
    for sid, answered in acks.items():
        for ack in answered:
            assert stored[sid, ack[0]] == ack  # 0 lost: every acknowledgement is in the database, as answered
        assert sorted(a[1] for a in answered) == list(range(1, APPENDS + 1))


def test_sigterm_drains_an_open_turn_and_applies_the_append_it_held(server: Server, tmp_path):
    assert server.call("PUT", "/v1/sessions/d", {}).status == 201
    tid = server.call("POST", "/v1/sessions/d/turns", {}).body["turn"]
    assert (
        server.call("POST", f"/v1/sessions/d/messages?turn={tid}", {"role": "user", "content": "in turn"}).status == 201
    )
    held: list = []
    waiting = threading.Thread(
        target=lambda: held.append(server.call("POST", "/v1/sessions/d/messages", {"role": "user", "content": "held"}))
    )
    waiting.start()
    # the turn's holder leaves when the shutdown has begun: draining lets it
    closer = threading.Timer(1.0, lambda: server.call("DELETE", f"/v1/sessions/d/turns/{tid}"))
    closer.start()
    assert server.stop() == 0
    closer.join(30)
    waiting.join(30)
    assert held and held[0].status == 201, held
    store = open_store(str(tmp_path / "state.db"))
    try:
        assert [m.content for m in store.transcript("d")] == ["in turn", "held"]
        assert store.turns() == []  # the lease was released
    finally:
        store.close()
