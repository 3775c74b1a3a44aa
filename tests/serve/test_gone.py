"""A held request whose client disconnected is withdrawn: it is never applied after
its client gave up."""

from __future__ import annotations

import json
import re
import socket
import time

from .client import Server

DEADLINE_S = 30.0


def _in_flight(server: Server) -> int:
    """Requests in flight, this one (the metrics request) not counted."""
    text = server.call("GET", "/metrics").body
    found = re.search(r"^session_actors_http_requests_in_flight (\d+)$", text, re.M)
    assert found is not None, text
    return int(found.group(1)) - 1


def _until(check, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {DEADLINE_S}s")
        time.sleep(0.02)


def _send_and_leave_later(server: Server, path: str, body: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {server.tokens['bot']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def test_an_append_held_behind_a_turn_is_withdrawn_when_its_client_leaves(server: Server):
    assert server.call("PUT", "/v1/sessions/g", {}).status == 201
    tid = server.call("POST", "/v1/sessions/g/turns", {}).body["turn"]
    assert server.call("POST", f"/v1/sessions/g/messages?turn={tid}", {"role": "user", "content": "ask"}).status == 201
    gone = [
        _send_and_leave_later(
            server, "/v1/sessions/g/messages", json.dumps({"role": "user", "content": "given up"}).encode()
        ),
        _send_and_leave_later(server, "/v1/sessions/g/retract", b""),
        _send_and_leave_later(server, "/v1/sessions/g/turns", b"{}"),
    ]
    _until(lambda: _in_flight(server) == len(gone), "the held requests arrive")
    for sock in gone:
        sock.close()  # the clients give up before the turn closes
    _until(lambda: _in_flight(server) == 0, "the held requests are withdrawn")
    assert (
        server.call("POST", f"/v1/sessions/g/messages?turn={tid}", {"role": "assistant", "content": "answer"}).status
        == 201
    )
    assert server.call("DELETE", f"/v1/sessions/g/turns/{tid}").status == 200
    after = server.call("POST", "/v1/sessions/g/messages", {"role": "user", "content": "still here"})
    assert after.status == 201
    contents = [m["content"] for m in server.call("GET", "/v1/sessions/g/messages").body["messages"]]
    assert contents == ["ask", "answer", "still here"]  # nothing given up, nothing retracted
    assert server.call("GET", "/v1/locks").body["turns"] == []  # the abandoned turn never opened
    assert server.call("GET", "/v1/sessions/g/messages?archived=true").body["messages"] == []
