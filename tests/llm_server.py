"""A real OpenAI-compatible chat-completions server on 127.0.0.1 for tests, and a real
forwarding HTTP proxy.

``behaviour`` picks the answer: ``"ok"``, ``"error"`` (HTTP 500), ``"rate_limited"``
(HTTP 429), ``"malformed"``, ``"not_json"``, ``"slow"`` (held until ``release`` is set),
``"drop"`` (the connection is closed without a reply) or ``"echo"`` (HTTP 401 whose body
echoes every request header, as some gateways do). ``script`` is consumed first, one
behaviour per request. Errors carry ``Retry-After: {retry_after}`` (default ``0``).
A good reply carries ``reply_extra`` (e.g. a ``usage`` and a ``model``) when set.

``POST /v1/responses/compact`` answers as OpenAI's does: every user message of the
input (as output messages with ``input_text`` parts), then one ``compaction`` item
(``cmp_N`` / ``enc-N``, N counting this server's compactions), with a ``usage``;
``"malformed"`` leaves the compaction item out.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

__all__ = ["FakeLLM", "FakeProxy", "running_llm_server", "running_proxy"]


class FakeLLM(ThreadingHTTPServer):
    """Answers ``POST /v1/chat/completions`` according to ``behaviour``."""

    daemon_threads = False  # server_close() joins handler threads: nothing leaks
    block_on_close = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behaviour = "ok"
        self.script: list[str] = []
        self.retry_after: str | None = "0"
        self.reply_extra: dict = {}
        self.requests: list[dict] = []
        self.headers_seen: list[dict] = []
        self.arrival_times: list[float] = []  # monotonic, one per request
        self.compactions = 0  # /responses/compact replies so far
        self.arrived = threading.Event()  # a request reached the handler
        self.release = threading.Event()  # lets a held ("slow") handler finish
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def next_behaviour(self) -> str:
        with self._lock:
            return self.script.pop(0) if self.script else self.behaviour


class _Handler(BaseHTTPRequestHandler):
    server: FakeLLM

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.arrival_times.append(time.monotonic())
        self.server.requests.append({"path": self.path, **json.loads(body)})
        self.server.headers_seen.append(dict(self.headers))
        self.server.arrived.set()
        behaviour = self.server.next_behaviour()
        if behaviour == "slow":
            self.server.release.wait(20)
        try:
            self._answer(behaviour)
        except OSError:
            pass  # the client already hung up (cancel / timeout tests)

    def _answer(self, behaviour: str) -> None:
        if behaviour == "error":
            self._send(500, b'{"error": "boom"}', retry=True)
        elif behaviour == "rate_limited":
            self._send(429, b'{"error": {"message": "slow down", "code": "rate_limit_exceeded"}}', retry=True)
        elif behaviour == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        elif behaviour == "echo":
            echoed = "; ".join(f"{k}: {v}" for k, v in self.headers.items())
            reply = {
                "error": {"message": f"Incorrect API key. You sent {echoed}", "type": echoed, "code": "invalid_api_key"}
            }
            self._send(401, json.dumps(reply).encode())
        elif self.path.endswith("/responses/compact"):
            reply = self._compacted(self.server.requests[-1]["input"], with_item=behaviour != "malformed")
            self._send(200, json.dumps(reply).encode())
        elif behaviour == "malformed":
            self._send(200, b'{"choices": []}')
        elif behaviour == "not_json":
            self._send(200, b"<html>gateway</html>")
        else:
            reply = {"choices": [{"message": {"role": "assistant", "content": "They planned a trip."}}]}
            reply |= self.server.reply_extra
            self._send(200, json.dumps(reply).encode())

    def _compacted(self, items: list[dict], *, with_item: bool) -> dict:
        with self.server._lock:
            self.server.compactions += 1
            n = self.server.compactions
        users = [item for item in items if item.get("role") == "user"]
        output = [
            {
                "id": f"msg_{n}_{i}",
                "type": "message",
                "status": "completed",
                "role": "user",
                "content": [{"type": "input_text", "text": _text(item["content"])}],
            }
            for i, item in enumerate(users)
        ]
        if with_item:
            output.append({"id": f"cmp_{n}", "type": "compaction", "encrypted_content": f"enc-{n}"})
        usage = {
            "input_tokens": 100 * len(items),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 100 * len(items) + 7,
        }
        return {"id": f"resp_{n}", "created_at": 1, "object": "response.compaction", "output": output, "usage": usage}

    def _send(self, status: int, payload: bytes, *, retry: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if retry and self.server.retry_after is not None:
            self.send_header("Retry-After", self.server.retry_after)
        self.end_headers()
        self.wfile.write(payload)


def _text(content: object) -> str:
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


class FakeProxy(ThreadingHTTPServer):
    """A forwarding proxy: plain requests (absolute URLs) are forwarded; ``CONNECT`` is
    recorded and refused (the tests have no TLS endpoint to tunnel to)."""

    daemon_threads = False
    block_on_close = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.seen: list[tuple[str, str, str | None]] = []  # (method, target, Proxy-Authorization)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(BaseHTTPRequestHandler):
    server: FakeProxy

    def log_message(self, *args) -> None:
        pass

    def _record(self) -> None:
        self.server.seen.append((self.command, self.path, self.headers.get("Proxy-Authorization")))

    def do_CONNECT(self) -> None:
        self._record()
        self.send_error(403, "no tunnels here")

    def do_POST(self) -> None:
        self._record()
        body = self.rfile.read(int(self.headers["Content-Length"]))
        target = urlsplit(self.path)
        headers = {
            k: v for k, v in self.headers.items() if k.lower() not in ("proxy-authorization", "connection", "host")
        }
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
        try:
            conn.request("POST", target.path, body=body, headers=headers)
            response = conn.getresponse()
            payload = response.read()
        finally:
            conn.close()
        self.send_response(response.status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@contextmanager
def _serving(server: ThreadingHTTPServer) -> Iterator[None]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield
    finally:
        release = getattr(server, "release", None)
        if release is not None:
            release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def running_llm_server() -> Iterator[FakeLLM]:
    """Serve until the block ends; the serving and handler threads are joined."""
    server = FakeLLM()
    with _serving(server):
        yield server


@contextmanager
def running_proxy() -> Iterator[FakeProxy]:
    server = FakeProxy()
    with _serving(server):
        yield server
