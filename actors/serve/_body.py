"""Request bodies: JSON read by hand (a route's body is a message or a list of them,
which a schema class per route would only slow down), and the messages in it."""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import Request

from protocol import InvalidArgumentError, InvalidMessageError, Message, TranscriptError

from ._errors import ServiceError

__all__ = ["MAX_DEPTH", "json_body", "messages_of", "option"]

#: How deep a body's arrays and objects may nest (stored metadata allows 64 levels of its own).
MAX_DEPTH = 100


async def json_body(request: Request, *, empty: Any = None) -> Any:
    """The body as JSON (``empty`` when there is none); 422 when it is not JSON."""
    raw = await request.body()
    if not raw.strip():
        if empty is None:
            raise ServiceError(422, "UnparseableBody", "the request needs a JSON body")
        return empty
    try:
        body = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ServiceError(422, "UnparseableBody", f"the body nests deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ServiceError(422, "UnparseableBody", f"the body is not JSON: {exc}") from None
    if _depth(body) > MAX_DEPTH:
        raise ServiceError(422, "UnparseableBody", f"the body nests deeper than {MAX_DEPTH} levels")
    return body


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of a double's range")
    return value


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in ``value`` (no recursion: any depth is safe)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                return depth
            pending.extend((child, depth + 1) for child in item)
    return deepest


def messages_of(body: Any, idempotency_key: str | None) -> list[Message]:
    """The messages of a ``POST .../messages`` body.
    ``Idempotency-Key`` names a single message (a list gives each message its own
    ``key``)."""
    single = isinstance(body, dict)
    items = [body] if single else body
    if not isinstance(items, list) or not items or not all(isinstance(item, dict) for item in items):
        raise InvalidMessageError("the body is a message object or a non-empty list of them")
    if idempotency_key is not None:
        if not single:
            raise InvalidArgumentError("Idempotency-Key applies to a single message; give each message of a list a key")
        given = items[0].get("key")
        if given is not None and given != idempotency_key:
            raise InvalidArgumentError("the message's key and its Idempotency-Key header differ")
        items = [{**items[0], "key": idempotency_key}]
    try:
        return [Message.from_dict(item) for item in items]
    except TranscriptError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a field of the wrong JSON type
        raise InvalidMessageError(f"not a message: {type(exc).__name__}: {exc}") from None


def option(body: Any, name: str, kind: type, default: Any) -> Any:
    """``body[name]`` when it is of ``kind`` (or absent: ``default``), else a 400."""
    if not isinstance(body, dict):
        raise InvalidArgumentError("the body is a JSON object")
    value = body.get(name, default)
    if value is not default and not isinstance(value, kind):
        raise InvalidArgumentError(f"{name} must be a {kind.__name__}, got {value!r}")
    return value
