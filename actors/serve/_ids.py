"""Session ids in paths: any valid id, ``/`` included, raw or ``%2F``-encoded.

ASGI hands a route the path already percent-decoded, leniently (a bad escape
becomes U+FFFD, so two different requests could name one session), and a route
template's ``{session_id}`` stops at the first ``/``. `SessionIds` (ASGI middleware,
outermost) reads the raw path of every ``/v1/sessions/...`` request instead: the
trailing segments that name a route (``messages``, ``turns/ID``, ...) are split off
the raw text first, so an ``%2F`` inside an id never splits it; the rest is the id,
decoded strictly (a ``%`` not followed by two hex digits, or bytes that are not
UTF-8, is a 400 ``InvalidSessionIdError``). The id then travels to the route as
``~`` and its UTF-8 in hex, which the ``sid`` path convertor turns back into the id.
``session_id=`` and ``after=`` in a query string are checked just as strictly.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

from starlette.convertors import Convertor, register_url_convertor

from protocol import InvalidSessionIdError

__all__ = ["SessionIds", "strict_unquote"]

_PREFIX = b"/v1/sessions/"
#: The last segment of a per-session route (``turns/ID`` is two segments).
_ROUTE_WORDS = frozenset({b"messages", b"turns", b"compact", b"interrupt", b"retract", b"compactions", b"lineage"})
#: Query parameters that name a session (``after``: the keyset of ``GET /v1/sessions``).
_ID_PARAMETERS = frozenset({b"session_id", b"after"})
_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")
_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")


class _SessionIdConvertor(Convertor[str]):
    regex = "~(?:[0-9a-f]{2})+"

    def convert(self, value: str) -> str:
        return bytes.fromhex(value[1:]).decode("utf-8")

    def to_string(self, value: str) -> str:
        return "~" + value.encode("utf-8").hex()


register_url_convertor("sid", _SessionIdConvertor())


def strict_unquote(raw: bytes, what: str) -> str:
    """``raw`` percent-decoded, or `InvalidSessionIdError` for a bad escape or bytes
    that are not UTF-8 (never a U+FFFD standing in for them)."""
    shown = raw.decode("latin-1")
    if _BAD_ESCAPE.search(raw):
        raise InvalidSessionIdError(shown, f"{what} {shown!r}: a '%' must be followed by two hex digits")
    decoded = _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw)
    try:
        return decoded.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSessionIdError(shown, f"{what} {shown!r}: the percent-decoded bytes are not UTF-8") from None


class SessionIds:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            try:
                scope = _rewritten(scope)
            except InvalidSessionIdError as exc:
                await _refuse(send, str(exc))
                return
        await self.app(scope, receive, send)


def _rewritten(scope: Any) -> Any:
    query = scope.get("query_string", b"")
    for pair in query.split(b"&"):
        name, _, value = pair.partition(b"=")
        if name in _ID_PARAMETERS:
            strict_unquote(value.replace(b"+", b" "), name.decode())
    raw = scope.get("raw_path") or scope["path"].encode("utf-8")
    raw = raw.partition(b"?")[0]
    if not raw.startswith(_PREFIX) or len(raw) == len(_PREFIX):
        return scope
    parts = raw[len(_PREFIX) :].split(b"/")
    if len(parts) >= 3 and parts[-2] == b"turns":
        cut = 2
    elif len(parts) >= 2 and parts[-1] in _ROUTE_WORDS:
        cut = 1
    else:
        cut = 0
    session_id = strict_unquote(b"/".join(parts[: len(parts) - cut]), "session id")
    if not session_id:
        raise InvalidSessionIdError(session_id)
    rest = "".join("/" + unquote(p.decode("latin-1")) for p in parts[len(parts) - cut :])
    path = "/v1/sessions/~" + session_id.encode("utf-8").hex() + rest
    return {**scope, "path": path, "raw_path": path.encode("ascii", "replace")}


async def _refuse(send: Any, message: str) -> None:
    body = json.dumps({"error": "InvalidSessionIdError", "message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})
