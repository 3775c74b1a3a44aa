"""A turn opened over HTTP belongs to the token that opened it (its hash, not its
name): no other token, admin included, appends through it, retracts in it, reads or
closes it; and a token file naming one token on two lines does not start."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from .client import Server


def test_only_the_opening_token_uses_or_closes_its_turn(server: Server):
    assert server.call("PUT", "/v1/sessions/d:1", {}, as_="discord").status == 201
    tid = server.call("POST", "/v1/sessions/d:1/turns", {}, as_="discord").body["turn"]
    sneak = {"role": "assistant", "content": "sneak"}
    for other in ("admin", "bot", "web"):
        for method, path, body in [
            ("POST", f"/v1/sessions/d:1/messages?turn={tid}", sneak),
            ("POST", f"/v1/sessions/d:1/retract?turn={tid}", None),
            ("GET", f"/v1/sessions/d:1/turns/{tid}", None),
            ("DELETE", f"/v1/sessions/d:1/turns/{tid}", None),
        ]:
            answer = server.call(method, path, body, as_=other)
            assert answer.status == 403, (other, method, path, answer.body)
    reader = server.call("POST", f"/v1/sessions/d:1/messages?turn={tid}", sneak, as_="reader")
    assert (reader.status, reader.body["error"]) == (403, "Forbidden")
    own = server.call(
        "POST", f"/v1/sessions/d:1/messages?turn={tid}", {"role": "user", "content": "mine"}, as_="discord"
    )
    assert own.status == 201
    assert server.call("GET", f"/v1/sessions/d:1/turns/{tid}", as_="discord").status == 200
    assert server.call("DELETE", f"/v1/sessions/d:1/turns/{tid}", as_="discord").status == 200
    contents = [m["content"] for m in server.call("GET", "/v1/sessions/d:1/messages").body["messages"]]
    assert contents == ["mine"]


def _line(name: str, scopes: str, source: str | None, secret: str) -> str:
    where = f" source={source}" if source else ""
    return f"{name} {scopes}{where} sha256:{hashlib.sha256(secret.encode()).hexdigest()}\n"


def test_a_token_file_with_two_lines_of_one_name_is_refused_at_start(tmp_path):
    from actors.serve import TokenFile
    from protocol import ConfigurationError

    path = tmp_path / "tokens.txt"
    path.write_text(_line("bot", "read,write", "web", "sa_one") + _line("bot", "read,write", "discord", "sa_two"))
    with pytest.raises(ConfigurationError, match="'bot'"):
        TokenFile.read(path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "actors.cli",
            "serve",
            "--db",
            str(tmp_path / "s.db"),
            "--port",
            "0",
            "--tokens",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "'bot' on more than one line" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "s.db").exists()
