"""A real OpenAI-compatible chat-completions server on 127.0.0.1 for tests, and a real
forwarding HTTP proxy.

``behaviour`` picks the answer: ``"ok"``, ``"error"`` (HTTP 500), ``"rate_limited"``
(HTTP 429), ``"malformed"``, ``"not_json"``, ``"slow"`` (held until ``release`` is set),
``"drop"`` (the connection is closed without a reply), ``"echo"`` (HTTP 401 whose body
echoes every request header, as some gateways do) or ``"converse"`` (a chat turn, see
`converse_reply`: an answer naming the ask and how many earlier messages came with it,
or first a call of the request's first tool when the ask holds `TOOL_MARKER`).
``script`` is consumed first, one behaviour per request. Errors carry
``Retry-After: {retry_after}`` (default ``0``). A good reply carries ``reply_extra``
(e.g. a ``usage`` and a ``model``) when set.

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

__all__ = ["TOOL_MARKER", "FakeLLM", "FakeProxy", "converse_reply", "running_llm_server", "running_proxy"]

#: ``"converse"``: a user ask holding this gets a call of the request's first tool first.
TOOL_MARKER = "[use the tool]"


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
        self.conversed = 0  # "converse" replies so far (numbers them)
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
        self._request = {"path": self.path, **json.loads(body)}
        self.server.requests.append(self._request)
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
        elif behaviour == "converse":
            with self.server._lock:
                self.server.conversed += 1
                n = self.server.conversed
            self._send(200, json.dumps(converse_reply(self._request, n)).encode())
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


def converse_reply(request: dict, n: int) -> dict:
    """The ``"converse"`` reply (the ``n``-th) to a chat-completions ``request``.

    When the last message is a user ask holding `TOOL_MARKER` and the request offers
    tools: a call (``call_{n}``) of the first tool, its first parameter set to the ask.
    Otherwise the answer ``reply {n} to «ASK» after {M} earlier messages``, ASK being
    the last user message and M the number of messages the request carried before it.
    """
    messages = request.get("messages") or []
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    ask = _text(messages[users[-1]]["content"]) if users else ""
    tools = request.get("tools") or []
    message: dict
    if messages and messages[-1].get("role") == "user" and TOOL_MARKER in ask and tools:
        function = tools[0]["function"]
        parameter = next(iter(function.get("parameters", {}).get("properties") or {}), "input")
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": function["name"], "arguments": json.dumps({parameter: ask})},
        }
        message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    else:
        earlier = users[-1] if users else 0
        message, finish = (
            {"role": "assistant", "content": f"reply {n} to «{ask}» after {earlier} earlier messages"},
            "stop",
        )
    usage = {"prompt_tokens": 10 * len(messages), "completion_tokens": 5, "total_tokens": 10 * len(messages) + 5}
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1,
        "model": request.get("model", "fake"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


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
