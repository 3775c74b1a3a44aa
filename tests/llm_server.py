"""A real OpenAI-compatible chat-completions server on 127.0.0.1 for tests.

``behaviour`` picks the answer: ``"ok"``, ``"error"`` (HTTP 500), ``"malformed"``,
``"not_json"`` or ``"slow"`` (held until ``release`` is set).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FakeLLM", "running_llm_server"]


class FakeLLM(ThreadingHTTPServer):
    """Answers ``POST /v1/chat/completions`` according to ``behaviour``."""

    daemon_threads = False  # server_close() joins handler threads: nothing leaks
    block_on_close = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behaviour = "ok"
        self.requests: list[dict] = []
        self.headers_seen: list[dict] = []
        self.arrived = threading.Event()  # a request reached the handler
        self.release = threading.Event()  # lets a held ("slow") handler finish

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: FakeLLM

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests.append({"path": self.path, **json.loads(body)})
        self.server.headers_seen.append(dict(self.headers))
        self.server.arrived.set()
        behaviour = self.server.behaviour
        if behaviour == "slow":
            self.server.release.wait(20)
        try:
            if behaviour == "error":
                self._send(500, b'{"error": "boom"}')
            elif behaviour == "malformed":
                self._send(200, b'{"choices": []}')
            elif behaviour == "not_json":
                self._send(200, b"<html>gateway</html>")
            else:
                reply = {"choices": [{"message": {"role": "assistant", "content": "They planned a trip."}}]}
                self._send(200, json.dumps(reply).encode())
        except OSError:
            pass  # the client already hung up (cancel / timeout tests)

    def _send(self, status: int, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@contextmanager
def running_llm_server() -> Iterator[FakeLLM]:
    """Serve until the block ends; the serving and handler threads are joined."""
    server = FakeLLM()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
