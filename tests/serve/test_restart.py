"""Turns survive a restart: a turn id names the durable lease, so after ``kill -9`` of
the server that opened it, its client goes on and closes it through the restarted
server (which keeps renewing it), while the other requests to the session wait; a
stale id (the lease lapsed and was taken by someone else) is a clear 409."""

from __future__ import annotations

import threading
import time

import pytest

from .client import Server, start_server, token_file
from .conftest import TOKENS

#: The lease outlives a restart (a few seconds on a loaded machine).
LEASE_S = 6


def _killed(server: Server) -> None:
    server.process.kill()
    server.process.wait(30)
    server.stop()


def _contents(server: Server, sid: str) -> list[str]:
    return [m["content"] for m in server.call("GET", f"/v1/sessions/{sid}/messages").body["messages"]]


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_turn_goes_on_and_closes_through_the_server_restarted_after_kill_9(backend, tmp_path, request):
    path = tmp_path / "tokens.txt"
    secrets = token_file(path, TOKENS)
    db = request.getfixturevalue("pg_url") if backend == "postgres" else str(tmp_path / "state.db")
    first = start_server(db, path, "--lease-ttl-s", str(LEASE_S), tokens_by_name=secrets)
    try:
        assert first.call("PUT", "/v1/sessions/chat/1", {"source": "web"}).status == 201
        tid = first.call("POST", "/v1/sessions/chat/1/turns", {}, as_="web").body["turn"]
        ask = {"role": "user", "content": "ask"}
        assert first.call("POST", f"/v1/sessions/chat/1/messages?turn={tid}", ask, as_="web").status == 201
    finally:
        _killed(first)
    second = start_server(db, path, "--lease-ttl-s", str(LEASE_S), "--drain", "5", tokens_by_name=secrets)
    try:
        answer = {"role": "assistant", "content": "answer"}
        assert second.call("POST", f"/v1/sessions/chat/1/messages?turn={tid}", answer, as_="web").status == 201
        for other in ("admin", "bot"):  # still the opening token's alone
            assert second.call("DELETE", f"/v1/sessions/chat/1/turns/{tid}", as_=other).status == 403
        held: list = []
        later = {"role": "user", "content": "later"}
        waiting = threading.Thread(
            target=lambda: held.append(second.call("POST", "/v1/sessions/chat/1/messages", later))
        )
        waiting.start()
        time.sleep(LEASE_S + 1)  # thinking past the lease's lifetime: the restarted server renews the adopted turn
        more = {"role": "assistant", "content": "more"}
        assert second.call("POST", f"/v1/sessions/chat/1/messages?turn={tid}", more, as_="web").status == 201
        state = second.call("GET", f"/v1/sessions/chat/1/turns/{tid}", as_="web")
        assert (state.status, state.body["interrupted"]) == (200, False)
        assert not held  # the other request waits behind the turn
        assert second.call("DELETE", f"/v1/sessions/chat/1/turns/{tid}", as_="web").status == 200
        waiting.join(60)
        assert held and held[0].status == 201, held
        assert _contents(second, "chat/1") == ["ask", "answer", "more", "later"]
        again = second.call("POST", f"/v1/sessions/chat/1/messages?turn={tid}", more, as_="web")
        assert (again.status, again.body["error"]) == (409, "TurnLostError")
    finally:
        assert second.stop() == 0, "".join(second.stderr)


def test_a_stale_turn_id_after_its_lease_was_taken_is_a_409_and_writes_nothing(tmp_path):
    path = tmp_path / "tokens.txt"
    secrets = token_file(path, TOKENS)
    db = str(tmp_path / "state.db")
    first = start_server(db, path, "--lease-ttl-s", "1", tokens_by_name=secrets)
    try:
        assert first.call("PUT", "/v1/sessions/s", {}).status == 201
        stale = first.call("POST", "/v1/sessions/s/turns", {}, as_="bot").body["turn"]
        assert first.call("POST", f"/v1/sessions/s/messages?turn={stale}", {"role": "user", "content": "a"}).status
    finally:
        _killed(first)
    second = start_server(db, path, "--lease-ttl-s", "1", "--drain", "5", tokens_by_name=secrets)
    try:
        deadline = time.monotonic() + 30
        while second.call("GET", "/v1/locks").body["turns"]:  # the killed server's lease lapses
            assert time.monotonic() < deadline, "the lease never lapsed"
            time.sleep(0.05)
        fresh = second.call("POST", "/v1/sessions/s/turns", {}, as_="bot")  # seals the dead turn, takes the lease
        assert fresh.status == 201, fresh.body
        for method, route, body in [
            ("POST", f"/v1/sessions/s/messages?turn={stale}", {"role": "assistant", "content": "stale"}),
            ("POST", f"/v1/sessions/s/retract?turn={stale}", None),
            ("DELETE", f"/v1/sessions/s/turns/{stale}", None),
        ]:
            refused = second.call(method, route, body, as_="bot")
            assert (refused.status, refused.body["error"]) == (409, "TurnLostError"), (route, refused.body)
        assert "stale" not in _contents(second, "s")
        assert second.call("DELETE", f"/v1/sessions/s/turns/{fresh.body['turn']}", as_="bot").status == 200
    finally:
        assert second.stop() == 0, "".join(second.stderr)
