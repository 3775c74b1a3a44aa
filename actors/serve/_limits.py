"""What bounds a client: the size of a body, the time to send it, the time to send a
request's headers, and how many requests run at once.

`RequestLimits` is ASGI middleware: a request beyond ``max_in_flight`` running at
once is refused with 503 (the event stream, which stays open, is not counted, nor
bounded in time: it reads no body); a body
over ``max_body`` bytes is refused with 413 before the route runs (from
``Content-Length`` when it is given, else by counting the chunks as they come), and
a body whose next chunk does not come within ``body_timeout_s`` is refused with 408.
Every refusal is the service's JSON error body (a `ServiceError` raised while a
route reads its body is answered by the application's error handler). `BoundedH11Protocol` is uvicorn's HTTP/1.1
protocol with a deadline on the headers: uvicorn itself waits for the rest of a
request's headers forever, so a client sending them a byte at a time (slowloris)
would hold its connection, and enough of them the server's.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from ._errors import ServiceError

__all__ = ["BoundedH11Protocol", "RequestLimits", "bounded_protocol"]


class RequestLimits:
    def __init__(self, app: Any, *, max_body: int, body_timeout_s: float, max_in_flight: int) -> None:
        self.app, self.max_body, self.body_timeout_s = app, max_body, body_timeout_s
        self.max_in_flight, self.in_flight = max_in_flight, 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/v1/events":  # open for as long as its client listens: no body, no timeout
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            await _answer(send, 503, "TooManyRequests", f"{self.max_in_flight} requests are in flight; retry")
            return
        self.in_flight += 1
        try:
            await self._limited(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _limited(self, scope: Any, receive: Any, send: Any) -> None:
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await _answer(send, 413, "RequestTooLarge", f"the body is over the {self.max_body}-byte limit")
            return
        received, answered, complete = 0, False, False

        async def limited() -> Any:
            nonlocal received, complete
            if complete:  # the body is in: what comes next is the client's disconnect, whenever it leaves
                return await receive()
            try:
                async with asyncio.timeout(self.body_timeout_s):  # no task per chunk, as wait_for makes
                    message = await receive()
            except TimeoutError:
                raise ServiceError(
                    408, "RequestTimeout", f"the body did not come within {self.body_timeout_s:g}s"
                ) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    raise ServiceError(413, "RequestTooLarge", f"the body is over the {self.max_body}-byte limit")
                complete = not message.get("more_body", False)
            return message

        async def watched(message: Any) -> None:
            nonlocal answered
            answered = answered or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, watched)
        except ServiceError as refused:
            if answered:
                raise
            await _answer(send, refused.status, refused.kind, refused.message)


async def _answer(send: Any, status: int, kind: str, message: str) -> None:
    body = json.dumps({"error": kind, "message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class BoundedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, closing a connection whose request headers are
    not complete within ``header_timeout_s`` of its first byte (or of the connection,
    for the first request)."""

    header_timeout_s = 10.0  # set per server by `bounded_protocol`
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and self._between_requests():
            self._arm()
        super().data_received(data)
        if not self._between_requests():
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self._between_requests() and not self.transport.is_closing():
            self.transport.close()


def bounded_protocol(header_timeout_s: float) -> type[BoundedH11Protocol]:
    """A `BoundedH11Protocol` class with this deadline (uvicorn takes a class)."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"header_timeout_s": header_timeout_s})
