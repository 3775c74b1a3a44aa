"""A plain HTTP client for the service's tests (http.client: no extra dependency),
and a running ``session-actors serve`` subprocess."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.serve import add_token

START_TIMEOUT_S = 30.0


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str]


def call(
    port: int,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    timeout: float = 30.0,
) -> Answer:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        payload = raw if raw is not None else None if body is None else json.dumps(body).encode()
        if payload is not None:
            sent.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=payload, headers=sent)
        response = conn.getresponse()
        data = response.read()
        kind = response.getheader("content-type", "")
        parsed = json.loads(data) if data and "json" in kind else data.decode("utf-8", "replace")
        return Answer(response.status, parsed, {k.lower(): v for k, v in response.getheaders()})
    finally:
        conn.close()


@dataclass
class Server:
    """A ``session-actors serve`` process on 127.0.0.1 and a free port."""

    process: subprocess.Popen[str]
    port: int
    tokens: dict[str, str] = field(default_factory=dict)
    stderr: list[str] = field(default_factory=list)
    collector: threading.Thread | None = None

    def call(self, method: str, path: str, body: Any = None, *, as_: str = "admin", **kw: Any) -> Answer:
        return call(self.port, method, path, body, token=self.tokens.get(as_), **kw)

    def stop(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)
            if self.collector is not None:
                self.collector.join(10)
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()


def token_file(path: Path, specs: dict[str, tuple[str, str | None]]) -> dict[str, str]:
    """Tokens ``name -> (scopes, source)`` added to the file at ``path``; their secrets."""
    return {name: add_token(path, name, scopes.split(","), source) for name, (scopes, source) in specs.items()}


def start_server(db: str, tokens: Path | None, *extra: str, tokens_by_name: dict[str, str] | None = None) -> Server:
    args = [sys.executable, "-m", "actors.cli", "serve", "--db", db, "--port", "0", *extra]
    args += ["--tokens", str(tokens)] if tokens is not None else ["--insecure-local"]
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"}
    )
    server = Server(process, 0, dict(tokens_by_name or {}))
    server.collector = threading.Thread(target=_collect, args=(process.stderr, server.stderr), daemon=True)
    server.collector.start()
    line = _first_line(process)
    found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if found is None:
        server.stop(10)
        raise AssertionError(f"serve did not start: {line!r} {''.join(server.stderr)}")
    server.port = int(found.group(1))
    return server


def _first_line(process: subprocess.Popen[str]) -> str:
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(process.stdout.readline() if process.stdout else ""))
    reader.start()
    reader.join(START_TIMEOUT_S)
    return got[0] if got else ""


def _collect(stream: Any, into: list[str]) -> None:
    for line in stream:
        into.append(line)


def compacted_twice(server: Server, sid: str) -> str:
    """A conversation whose first ask ("Plan a walk in Sintra") the head-tail
    compressor keeps through two compactions (a rotation, then in place); its live id."""
    assert server.call("PUT", f"/v1/sessions/{sid}", {"source": "web"}).status == 201
    texts = ["Plan a walk in Sintra", *(f"filler {n}" for n in range(9))]
    for n, text in enumerate(texts):
        message = {"role": "user" if n % 2 == 0 else "assistant", "content": text}
        assert server.call("POST", f"/v1/sessions/{sid}/messages", message).status == 201
    first = server.call("POST", f"/v1/sessions/{sid}/compact", {"force": True, "mode": "rotate"}).body
    assert first["status"] == "rotated", first
    for n in range(6):
        message = {"role": "assistant", "content": f"more {n}"}
        assert server.call("POST", f"/v1/sessions/{first['session_id']}/messages", message).status == 201
    second = server.call("POST", f"/v1/sessions/{sid}/compact", {"force": True, "mode": "in_place"}).body
    assert second["status"] == "compacted", second
    return str(second["session_id"])
