"""One cancellable HTTP POST for `LLMCompressor`, through a proxy when configured.

The exchange runs on a helper thread so the calling thread can watch ``cancel`` and
the deadline: either one shuts the socket down, which makes the helper's blocked
read return at once, and the helper is always joined before `Exchange.run` returns
(no thread outlives a call). Proxies come from the compressor's environment
(``http_proxy``/``https_proxy``/``all_proxy``/``no_proxy``, either case; an
``https://`` endpoint goes through a ``CONNECT`` tunnel).
"""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit
from urllib.request import proxy_bypass_environment  # type: ignore[attr-defined]  # public, not in typeshed

from protocol import ConfigurationError

__all__ = ["Cancelled", "Endpoint", "Exchange", "Failed", "Proxy", "Reply", "TimedOut", "TooLarge", "proxy_for"]

#: How often the waiting thread looks at ``cancel`` and the deadline.
_POLL_S = 0.02
#: Longest wait for a TCP connection: a cancel cannot interrupt a connect in progress.
_CONNECT_TIMEOUT_S = 10.0
#: Largest reply body read; a summary is far smaller, anything bigger is a broken endpoint.
MAX_REPLY_BYTES = 8 * 1024 * 1024


class Failed(Exception):
    """No reply: ``retryable`` when the connection was refused, reset or dropped."""

    def __init__(self, text: str, *, retryable: bool) -> None:
        super().__init__(text)
        self.retryable = retryable


class Cancelled(Exception):
    """``cancel`` was set while the exchange was in flight."""


class TimedOut(Exception):
    """No full reply within the timeout."""


class TooLarge(Exception):
    """The reply body is over `MAX_REPLY_BYTES`."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str
    host: str
    port: int | None
    path: str

    @classmethod
    def parse(cls, base_url: str) -> Endpoint:
        parts = urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                f"LLM base URL must be http(s)://host[:port][/path], got {_without_userinfo(base_url)!r}"
            )
        try:
            port = parts.port
        except ValueError as exc:
            raise ConfigurationError("LLM base URL has a bad port") from exc
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/") + "/chat/completions")

    @property
    def url(self) -> str:
        port = f":{self.port}" if self.port else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}{port}{self.path}"


@dataclass(frozen=True, slots=True)
class Proxy:
    """An ``http://`` proxy; ``authorization`` is the Proxy-Authorization value, if any."""

    host: str
    port: int
    authorization: str | None = None

    @property
    def secret(self) -> str | None:
        return self.authorization


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    retry_after: str | None


def proxy_for(endpoint: Endpoint, environ: Mapping[str, str]) -> Proxy | None:
    """The proxy ``environ`` sets for ``endpoint`` (None: connect directly)."""
    url = _env(environ, f"{endpoint.scheme}_proxy") or _env(environ, "all_proxy")
    if not url:
        return None
    no_proxy = _env(environ, "no_proxy")
    target = endpoint.host if endpoint.port is None else f"{endpoint.host}:{endpoint.port}"
    if no_proxy and proxy_bypass_environment(target, {"no": no_proxy}):
        return None
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigurationError(
            f"only http:// proxies are supported for the LLM endpoint, got a {parts.scheme}:// proxy"
        )
    try:
        port = parts.port or 80
    except ValueError as exc:
        raise ConfigurationError("the proxy URL has a bad port") from exc
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    return Proxy(parts.hostname, port, authorization)


def _env(environ: Mapping[str, str], name: str) -> str | None:
    """Lower case wins, as curl and urllib have it."""
    return environ.get(name) or environ.get(name.upper()) or None


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.username is None and parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


class Exchange:
    """One HTTP POST on a helper thread, abortable by shutting its socket down."""

    def __init__(
        self, endpoint: Endpoint, headers: dict[str, str], body: bytes, timeout_s: float, proxy: Proxy | None
    ) -> None:
        self._endpoint = endpoint
        self._headers = headers
        self._body = body
        self._timeout_s = timeout_s
        self._proxy = proxy
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self._aborted = False
        self._done = threading.Event()
        self._result: Reply | None = None
        self._error: BaseException | None = None

    def run(self, cancel: threading.Event) -> Reply:
        """The reply, or `Cancelled`, `TimedOut`, `Failed`, `TooLarge`."""
        deadline = time.monotonic() + self._timeout_s
        worker = threading.Thread(target=self._exchange, name="session-actors-llm", daemon=True)
        worker.start()
        try:
            reason = self._wait(cancel, deadline)
            if reason is not None:
                self._abort()
                raise reason
        finally:
            worker.join()
        if self._error is not None:
            if isinstance(self._error, (TooLarge, Cancelled)):
                raise self._error
            if isinstance(self._error, TimeoutError):  # the socket timeout beat our deadline
                raise TimedOut() from self._error
            retryable = isinstance(self._error, (ConnectionError, http.client.HTTPException))
            raise Failed(_describe_io_error(self._error), retryable=retryable) from self._error
        assert self._result is not None
        return self._result

    def _wait(self, cancel: threading.Event, deadline: float) -> Exception | None:
        """None once the exchange finished; else why it must be aborted."""
        while not self._done.wait(_POLL_S):
            if cancel.is_set():
                return Cancelled()
            if time.monotonic() >= deadline:
                return TimedOut()
        return None

    def _exchange(self) -> None:
        try:
            conn = self._connect()
            conn.request("POST", self._target(), body=self._body, headers=self._request_headers())
            response = conn.getresponse()
            body = response.read(MAX_REPLY_BYTES + 1)
            if len(body) > MAX_REPLY_BYTES:
                raise TooLarge()
            self._result = Reply(response.status, body, response.getheader("Retry-After"))
        except BaseException as exc:  # reported to the waiting thread, never lost
            self._error = exc
        finally:
            self._close()
            self._done.set()

    def _target(self) -> str:
        """Plain HTTP through a proxy sends the absolute URL; a tunnel, the path."""
        if self._proxy is not None and self._endpoint.scheme == "http":
            return self._endpoint.url
        return self._endpoint.path

    def _request_headers(self) -> dict[str, str]:
        proxy = self._proxy
        if proxy is None or proxy.authorization is None or self._endpoint.scheme != "http":
            return self._headers
        return {**self._headers, "Proxy-Authorization": proxy.authorization}

    def _connect(self) -> http.client.HTTPConnection:
        conn = self._new_connection()
        with self._lock:
            if self._aborted:
                raise Cancelled()
            self._conn = conn
        conn.connect()
        conn.sock.settimeout(self._timeout_s)
        with self._lock:  # an abort that came while connecting found no socket to shut
            if self._aborted:
                raise Cancelled()
        return conn

    def _new_connection(self) -> http.client.HTTPConnection:
        ep, proxy = self._endpoint, self._proxy
        timeout = min(self._timeout_s, _CONNECT_TIMEOUT_S)
        host, port = (ep.host, ep.port) if proxy is None else (proxy.host, proxy.port)
        if ep.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=timeout, context=ssl.create_default_context()
            )
            if proxy is not None:
                tunnel_headers = {} if proxy.authorization is None else {"Proxy-Authorization": proxy.authorization}
                conn.set_tunnel(ep.host, ep.port, headers=tunnel_headers)
            return conn
        return http.client.HTTPConnection(host, port, timeout=timeout)

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


def _describe_io_error(exc: BaseException) -> str:
    """A short cause without anything the peer sent (it may echo our headers)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"
    return type(exc).__name__
