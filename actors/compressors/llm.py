"""`LLMCompressor`: summarize the middle of a transcript with an OpenAI-compatible model.

The result has the shape `HeadTailCompressor` produces: the leading system prompt and
the first real user ask are kept, the middle is replaced by one summary message whose
content starts with `SUMMARY_PREFIX`, and the last ``keep_last`` messages stay verbatim.

The request is ``POST {base_url}/chat/completions`` over the standard library's
``http.client`` (no extra runtime dependency). It runs on a helper thread so the calling
thread can watch ``cancel`` and the deadline: either one shuts the socket down, which
makes the helper's blocked read return at once, and the helper is always joined before
`LLMCompressor.compress` returns (no thread outlives a call).
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import socket
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from protocol import (
    SUMMARY_PREFIX,
    ConfigurationError,
    InvalidArgumentError,
    Message,
    TranscriptError,
)

from .shape import split_transcript, summary_message

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "LLMCancelledError",
    "LLMCompressor",
    "LLMCompressorError",
    "LLMTimeoutError",
]

log = logging.getLogger("session_actors.llm")

ENV_BASE_URL = "SESSION_ACTORS_LLM_BASE_URL"
ENV_MODEL = "SESSION_ACTORS_LLM_MODEL"
ENV_API_KEY = "SESSION_ACTORS_LLM_API_KEY"

#: Messages kept verbatim at the end when neither the caller nor a policy says.
DEFAULT_KEEP_LAST = 6
#: How often the waiting thread looks at ``cancel`` and the deadline.
_POLL_S = 0.02
#: Longest wait for a TCP connection: a cancel cannot interrupt a connect in progress.
_CONNECT_TIMEOUT_S = 10.0
#: Largest reply body read; a summary is far smaller, anything bigger is a broken endpoint.
_MAX_REPLY_BYTES = 8 * 1024 * 1024
#: Characters per token of the rough budget we ask the model to stay under.
_CHARS_PER_TOKEN = 4
#: The smallest summary budget we request, however small ``target_tokens`` is.
_MIN_SUMMARY_TOKENS = 128

_INSTRUCTIONS = (
    "You compact a chat transcript so the conversation can continue within a context budget. "
    "Write a faithful, dense summary of the conversation excerpt you are given: the user's goals, "
    "decisions made, facts and names established, tool results that matter, and open questions. "
    "Do not invent anything. Reply with the summary text only, in at most about {budget} tokens."
)


class LLMCompressorError(TranscriptError):
    """The summary request failed (HTTP error, unreachable endpoint or malformed reply)."""

    def __init__(self, message: str | None = None, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class LLMTimeoutError(LLMCompressorError, TimeoutError):
    """The summary request took longer than its timeout."""


class LLMCancelledError(LLMCompressorError):
    """The summary request was cancelled while in flight."""


@dataclass(frozen=True, slots=True)
class _Endpoint:
    scheme: str
    host: str
    port: int | None
    path: str

    @classmethod
    def parse(cls, base_url: str) -> _Endpoint:
        parts = urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                f"LLM base URL must be http(s)://host[:port][/path], got {base_url!r}"
            )
        try:
            port = parts.port
        except ValueError as exc:
            raise ConfigurationError(f"LLM base URL has a bad port: {base_url!r}") from exc
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/") + "/chat/completions")


class LLMCompressor:
    """A `Compressor` backed by any OpenAI-compatible chat-completions endpoint.

    ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``), ``model`` and ``api_key`` come from
    the arguments or, when omitted, from ``SESSION_ACTORS_LLM_BASE_URL``,
    ``SESSION_ACTORS_LLM_MODEL`` and ``SESSION_ACTORS_LLM_API_KEY``. The key is optional
    (local servers rarely need one); a missing base URL or model is a `ConfigurationError`.
    ``timeout_s`` bounds one request end to end. ``keep_last`` messages stay verbatim
    (the policy's when None). Stateless across calls.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        keep_last: int | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        base_url = base_url or env.get(ENV_BASE_URL) or None
        model = model or env.get(ENV_MODEL) or None
        if not base_url or not model:
            missing = [n for n, v in ((ENV_BASE_URL, base_url), (ENV_MODEL, model)) if not v]
            raise ConfigurationError(
                f"LLMCompressor needs a base URL and a model; set {' and '.join(missing)}"
            )
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
            raise InvalidArgumentError(f"timeout_s must be finite and > 0, got {timeout_s!r}")
        if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 0):
            raise InvalidArgumentError(f"keep_last must be an int >= 0 or None, got {keep_last!r}")
        self._endpoint = _Endpoint.parse(base_url)
        self.base_url = base_url
        self.model = model
        self._api_key = api_key or env.get(ENV_API_KEY) or None
        self.timeout_s = float(timeout_s)
        self.keep_last = keep_last

    @property
    def name(self) -> str:
        return f"llm:{self.model}"

    def for_policy(self, policy: Any) -> LLMCompressor:
        """Adopt the policy's ``keep_last`` when none was given (see `bind_compressor`)."""
        if self.keep_last is not None:
            return self
        return LLMCompressor(
            base_url=self.base_url, model=self.model, api_key=self._api_key,
            timeout_s=self.timeout_s, keep_last=policy.keep_last, environ={},
        )

    def __repr__(self) -> str:  # never shows the key
        return f"LLMCompressor(base_url={self.base_url!r}, model={self.model!r})"

    # -- the Compressor protocol ---------------------------------------------------

    def compress(
        self, messages: Sequence[Message], *, target_tokens: int, cancel: threading.Event
    ) -> Sequence[Message]:
        """Return head + one summary message + the last ``keep_last`` messages.

        A transcript with nothing between head and tail comes back unchanged.
        Raises `LLMCompressorError` (`LLMTimeoutError`, `LLMCancelledError`).
        """
        split = split_transcript(messages, self._keep_last())
        if not split.middle:
            return [*split.head, *split.tail]
        budget = self._summary_budget(split.head, split.tail, target_tokens)
        summary = self._summarize(split.middle, budget, cancel)
        text = summary if summary.startswith(SUMMARY_PREFIX) else f"{SUMMARY_PREFIX}\n{summary}"
        return [*split.head, summary_message(text, split), *split.tail]

    # -- shaping -------------------------------------------------------------------

    def _keep_last(self) -> int:
        return DEFAULT_KEEP_LAST if self.keep_last is None else self.keep_last

    @staticmethod
    def _summary_budget(head: list[Message], tail: list[Message], target_tokens: int) -> int:
        kept = sum(len(m.text) for m in (*head, *tail)) // _CHARS_PER_TOKEN
        return max(_MIN_SUMMARY_TOKENS, int(target_tokens) - kept)

    def _request_body(self, middle: list[Message], budget: int) -> bytes:
        excerpt = "\n\n".join(_render(m) for m in middle)
        payload = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": _INSTRUCTIONS.format(budget=budget)},
                {"role": "user", "content": excerpt},
            ],
            "max_tokens": budget,
            "temperature": 0,
            "stream": False,
        }
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")

    # -- the request ---------------------------------------------------------------

    def _summarize(self, middle: list[Message], budget: int, cancel: threading.Event) -> str:
        if cancel.is_set():
            raise LLMCancelledError("summary request cancelled before it was sent")
        body = self._request_body(middle, budget)
        call = _Call(self._endpoint, self._headers(len(body)), body, self.timeout_s)
        status, raw = call.run(cancel)
        if not 200 <= status < 300:
            snippet = raw[:200].decode("utf-8", "replace")
            raise LLMCompressorError(
                f"LLM endpoint answered HTTP {status}: {snippet}", status=status
            )
        return _parse_summary(raw)

    def _headers(self, length: int) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Content-Length": str(length),
            "User-Agent": "session-actors",
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers


class _Call:
    """One HTTP exchange on a helper thread, abortable by shutting its socket down."""

    def __init__(self, endpoint: _Endpoint, headers: dict[str, str], body: bytes, timeout_s: float):
        self._endpoint = endpoint
        self._headers = headers
        self._body = body
        self._timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self._aborted = False
        self._done = threading.Event()
        self._result: tuple[int, bytes] | None = None
        self._error: BaseException | None = None

    def run(self, cancel: threading.Event) -> tuple[int, bytes]:
        deadline = time.monotonic() + self._timeout_s
        worker = threading.Thread(target=self._exchange, name="session-actors-llm", daemon=True)
        worker.start()
        try:
            reason = self._wait(cancel, deadline)
            if reason is not None:
                self._abort()
                worker.join()
                if reason == "cancel":
                    raise LLMCancelledError("summary request cancelled while in flight")
                raise LLMTimeoutError(f"LLM endpoint did not answer within {self._timeout_s:g}s")
        finally:
            worker.join()
        if self._error is not None:
            if isinstance(self._error, LLMCompressorError):
                raise self._error
            if isinstance(self._error, TimeoutError):  # the socket timeout beat our deadline
                raise LLMTimeoutError(
                    f"LLM endpoint did not answer within {self._timeout_s:g}s"
                ) from self._error
            raise LLMCompressorError(f"LLM request failed: {self._error}") from self._error
        assert self._result is not None
        return self._result

    def _wait(self, cancel: threading.Event, deadline: float) -> str | None:
        """None once the exchange finished; else why it must be aborted."""
        while not self._done.wait(_POLL_S):
            if cancel.is_set():
                return "cancel"
            if time.monotonic() >= deadline:
                return "timeout"
        return None

    def _exchange(self) -> None:
        try:
            conn = self._connect()
            conn.request("POST", self._endpoint.path, body=self._body, headers=self._headers)
            response = conn.getresponse()
            body = response.read(_MAX_REPLY_BYTES + 1)
            if len(body) > _MAX_REPLY_BYTES:
                raise LLMCompressorError(f"LLM reply is over {_MAX_REPLY_BYTES} bytes")
            self._result = (response.status, body)
        except BaseException as exc:  # reported to the waiting thread, never lost
            self._error = exc
        finally:
            self._close()
            self._done.set()

    def _connect(self) -> http.client.HTTPConnection:
        ep = self._endpoint
        connect_timeout = min(self._timeout_s, _CONNECT_TIMEOUT_S)
        if ep.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                ep.host, ep.port, timeout=connect_timeout, context=ssl.create_default_context()
            )
        else:
            conn = http.client.HTTPConnection(ep.host, ep.port, timeout=connect_timeout)
        with self._lock:
            if self._aborted:
                raise LLMCancelledError("summary request aborted before connecting")
            self._conn = conn
        conn.connect()
        conn.sock.settimeout(self._timeout_s)
        with self._lock:  # an abort that came while connecting found no socket to shut
            if self._aborted:
                raise LLMCancelledError("summary request aborted while connecting")
        return conn

    def _abort(self) -> None:
        """Unblock the helper: shut the socket down (close alone may not wake a recv)."""
        with self._lock:
            self._aborted = True
            sock = self._conn.sock if self._conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed or never connected: nothing to wake

    def _close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _render(message: Message) -> str:
    label = message.role if not message.name else f"{message.role} ({message.name})"
    text = message.text
    if message.tool_calls:
        text = f"{text}\n[tool calls] {json.dumps(message.tool_calls, ensure_ascii=False)}"
    return f"{label}: {text}"


def _parse_summary(raw: bytes) -> str:
    """``choices[0].message.content`` as non-empty text, else `LLMCompressorError`."""
    try:
        document: Any = json.loads(raw.decode("utf-8"))
        content = document["choices"][0]["message"]["content"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
        raise LLMCompressorError(
            f"malformed reply from the LLM endpoint (expected choices[0].message.content): {exc!r}"
        ) from exc
    if isinstance(content, list):  # multi-part content: keep the text parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if not isinstance(content, str) or not content.strip():
        raise LLMCompressorError("malformed reply from the LLM endpoint: empty summary")
    return content.strip()
