"""Two ``serve`` processes on one PostgreSQL database: a turn opened through one holds
the appends sent through the other until it closes, and the other way round."""

from __future__ import annotations

import threading

import pytest

from .client import start_server, token_file

pytestmark = pytest.mark.postgres


def test_turns_from_two_servers_on_one_postgresql_stay_whole(pg_url, tmp_path):
    path = tmp_path / "tokens.txt"
    secrets = token_file(path, {"admin": ("admin", None)})
    a = start_server(pg_url, path, "--drain", "5", tokens_by_name=secrets)
    b = start_server(pg_url, path, "--drain", "5", tokens_by_name=secrets)
    try:
        assert a.call("PUT", "/v1/sessions/shared", {}).status == 201
        assert b.call("PUT", "/v1/sessions/shared", {}).status == 200  # one database
        for first, second, name in [(a, b, "a"), (b, a, "b")]:
            tid = first.call("POST", "/v1/sessions/shared/turns", {}).body["turn"]
            ask = {"role": "user", "content": f"{name}: ask"}
            assert first.call("POST", f"/v1/sessions/shared/messages?turn={tid}", ask).status == 201
            held: list = []
            other = threading.Thread(
                target=lambda s=second, n=name: held.append(
                    s.call("POST", "/v1/sessions/shared/messages", {"role": "user", "content": f"{n}: double text"})
                )
            )
            rejected = second.call("POST", "/v1/sessions/shared/turns", {"on_busy": "reject"})
            assert (rejected.status, rejected.body["error"]) == (409, "SessionBusyError")
            other.start()
            answer = {"role": "assistant", "content": f"{name}: answer"}
            assert first.call("POST", f"/v1/sessions/shared/messages?turn={tid}", answer).status == 201
            assert not held  # still held by the other server's turn
            assert first.call("DELETE", f"/v1/sessions/shared/turns/{tid}").status == 200
            other.join(60)
            assert held and held[0].status == 201
        contents = [m["content"] for m in a.call("GET", "/v1/sessions/shared/messages").body["messages"]]
        assert contents == ["a: ask", "a: answer", "a: double text", "b: ask", "b: answer", "b: double text"]
    finally:
        codes = [a.stop(), b.stop()]
    assert codes == [0, 0], "".join(a.stderr + b.stderr)
