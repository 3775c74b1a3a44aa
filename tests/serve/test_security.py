"""Security by default: tokens, scopes, sources, bounded requests, errors without secrets."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from .client import call, start_server


def test_a_missing_or_wrong_token_is_401_and_a_missing_scope_403(server):
    assert server.call("PUT", "/v1/sessions/x", {}).status == 201
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer "}):
        answer = call(server.port, "GET", "/v1/sessions/x", headers=headers)
        assert (answer.status, answer.body["error"]) == (401, "Unauthorized"), headers
    reader = server.call("POST", "/v1/sessions/x/messages", {"role": "user", "content": "hi"}, as_="reader")
    assert (reader.status, reader.body["error"]) == (403, "Forbidden")
    assert server.call("GET", "/v1/sessions/x", as_="reader").status == 200
    assert server.call("GET", "/v1/sessions/x/messages").body["messages"] == []  # nothing was written


def test_a_source_token_reaches_only_its_sources_sessions(server):
    assert server.call("PUT", "/v1/sessions/web:1", {"source": "web"}).status == 201
    assert server.call("PUT", "/v1/sessions/d:1", {}, as_="discord").body["source"] == "discord"
    assert server.call("PUT", "/v1/sessions/d:2", {"source": "web"}, as_="discord").status == 403
    for method, path, body in [
        ("GET", "/v1/sessions/web:1", None),
        ("GET", "/v1/sessions/web:1/messages", None),
        ("POST", "/v1/sessions/web:1/messages", {"role": "user", "content": "sneak"}),
        ("POST", "/v1/sessions/web:1/turns", {}),
        ("POST", "/v1/sessions/web:1/compact", {"force": True}),
        ("PATCH", "/v1/sessions/web:1", {"metadata": {"x": 1}}),
        ("GET", "/v1/sessions/web:1/lineage", None),
        ("PUT", "/v1/sessions/web:1", {"source": "discord"}),
    ]:
        answer = server.call(method, path, body, as_="discord")
        assert (answer.status, answer.body["error"]) == (403, "AccessDeniedError"), (method, path, answer.body)
    listed = server.call("GET", "/v1/sessions", as_="discord").body["sessions"]
    assert [s["id"] for s in listed] == ["d:1"]
    assert server.call("GET", "/v1/sessions?source=web", as_="discord").status == 403
    assert server.call("GET", "/v1/sessions/web:1/messages").body["messages"] == []
    assert server.call("GET", "/v1/sessions/web:1").body["metadata"] == {}


def test_a_source_token_searches_and_reads_compactions_of_its_source_alone(server):
    for sid, source in (("web:1", "web"), ("d:1", "discord")):
        assert server.call("PUT", f"/v1/sessions/{sid}", {"source": source}).status == 201
        for n in range(12):
            message = {"role": "user" if n % 2 == 0 else "assistant", "content": f"secret plan {n}"}
            assert server.call("POST", f"/v1/sessions/{sid}/messages", message).status == 201
        assert server.call("POST", f"/v1/sessions/{sid}/compact", {"force": True}).body["status"] == "compacted"
    hits = server.call("GET", "/v1/search?q=secret&limit=100", as_="discord").body["hits"]
    assert hits and {h["session_id"] for h in hits} == {"d:1"}
    every = server.call("GET", "/v1/search?q=secret&limit=100").body["hits"]
    assert {h["session_id"] for h in every} == {"web:1", "d:1"}  # the admin sees both
    for path in ("/v1/search?q=secret&source=web", "/v1/search?q=secret&session_id=web:1"):
        assert server.call("GET", path, as_="discord").status == 403, path
    records = {
        sid: server.call("GET", f"/v1/sessions/{sid}/compactions").body["compactions"][0]["id"]
        for sid in ("web:1", "d:1")
    }
    assert server.call("GET", f"/v1/compactions/{records['web:1']}", as_="discord").status == 403
    assert server.call("GET", f"/v1/compactions/{records['d:1']}", as_="discord").status == 200
    for path in ("/v1/usage?source=web", "/v1/usage?session_id=web:1"):
        assert server.call("GET", path, as_="discord").status == 403, path
    assert server.call("GET", "/v1/usage", as_="discord").status == 200


def test_ids_that_try_to_leave_their_path_are_refused(server, tmp_path):
    for path in [
        "/v1/sessions/..%2F..%2Fetc%2Fpasswd",
        "/v1/sessions/%2e%2e/messages",
        "/v1/sessions/a%00b",
        "/v1/sessions/../../healthz",
        "/console/../../etc/passwd",
        "/console/%2e%2e%2fapp.js",
    ]:
        answer = server.call("GET", path)
        assert answer.status in (400, 404), (path, answer.status)
        assert "root:" not in str(answer.body)
    assert server.call("PUT", "/v1/sessions/a%0Ab", {}).status == 400
    assert server.call("GET", "/v1/sessions").body["sessions"] == []


def test_an_oversized_body_is_413_whether_declared_or_streamed(tmp_path):
    server = start_server(str(tmp_path / "s.db"), None, "--max-body", "1000")
    try:
        assert server.call("PUT", "/v1/sessions/big", {}).status == 201
        big = {"role": "user", "content": "x" * 5000}
        declared = server.call("POST", "/v1/sessions/big/messages", big)
        assert (declared.status, declared.body["error"]) == (413, "RequestTooLarge")
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/sessions/big/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"x" * 600
            for _ in range(3):
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sock.sendall(b"0\r\n\r\n")
            assert b" 413 " in sock.recv(4096).split(b"\r\n")[0] + b" "
        assert server.call("GET", "/v1/sessions/big/messages").body["messages"] == []
    finally:
        assert server.stop() == 0


def test_a_client_sending_headers_a_byte_at_a_time_is_cut_off(tmp_path):
    server = start_server(str(tmp_path / "s.db"), None, "--header-timeout", "1")
    try:
        slow = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(20)]
        for sock in slow:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: ")
        assert call(server.port, "GET", "/healthz").status == 200  # the others are still served
        began = time.monotonic()
        for sock in slow:
            assert sock.recv(100) == b""  # closed by the server, not answered
            sock.close()
        assert time.monotonic() - began < 8
    finally:
        assert server.stop() == 0


def test_serve_refuses_to_start_without_tokens_or_insecure_on_a_public_address(tmp_path):
    db = str(tmp_path / "s.db")
    base = [sys.executable, "-m", "actors.cli", "serve", "--db", db, "--port", "0"]
    for extra, words in [
        ([], "needs --tokens"),
        (["--insecure-local", "--host", "0.0.0.0"], "loopback"),
        (["--tokens", str(tmp_path / "missing.txt")], "cannot read the token file"),
    ]:
        done = subprocess.run(base + extra, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and words in done.stderr, (extra, done.stderr)
        assert "Traceback" not in done.stderr


def test_errors_never_carry_a_traceback(server):
    answers = [
        server.call("POST", "/v1/sessions/x/messages", None, raw=b"\xff\xfe"),
        server.call("PATCH", "/v1/sessions/x", {"metadata": "nope"}),
        server.call("GET", "/v1/sessions/x/messages?limit=abc"),
        server.call("GET", "/v1/nowhere"),
        server.call("DELETE", "/v1/sessions"),
    ]
    for answer in answers:
        assert answer.status in (400, 404, 405, 422), answer
        assert set(answer.body) == {"error", "message"} and "Traceback" not in answer.body["message"]


@pytest.mark.parametrize(
    "line", ["bot read", "bot fly sha256:" + "0" * 64, "bot read sha256:xyz", "b@d! read sha256:" + "0" * 64]
)
def test_a_bad_token_file_line_stops_the_start_naming_the_line(tmp_path, line):
    from actors.serve import TokenFile
    from protocol import ConfigurationError

    path = tmp_path / "tokens.txt"
    path.write_text("# a comment\n\n" + line + "\n")
    with pytest.raises(ConfigurationError, match=r"tokens.txt:3"):
        TokenFile.read(path)


def test_token_add_prints_the_token_once_and_stores_only_its_hash(tmp_path):
    path = tmp_path / "tokens.txt"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "actors.cli",
            "token",
            "add",
            "bot",
            "--scope",
            "read,write",
            "--source",
            "web",
            "--tokens",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    secret = done.stdout.split()[-1]
    text = path.read_text()
    assert secret not in text and text.startswith("bot read,write source=web sha256:")
    assert path.stat().st_mode & 0o777 == 0o600
    from actors.serve import TokenFile

    token = TokenFile.read(path).identify(secret)
    assert token is not None and token.source == "web" and token.allows("write") and not token.allows("admin")
    again = subprocess.run(
        [sys.executable, "-m", "actors.cli", "token", "add", "bot", "--scope", "read", "--tokens", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 2 and "already has a token named 'bot'" in again.stderr
