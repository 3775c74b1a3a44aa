"""Request bodies: JSON read by hand (a route's body is a message or a list of them,
which a schema class per route would only slow down), and the messages in it."""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import Request

from protocol import InvalidArgumentError, InvalidMessageError, Message, TranscriptError

from ._errors import ServiceError

__all__ = ["MAX_DEPTH", "json_body", "messages_of", "only", "option"]

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
    """The messages of a ``POST .../messages`` body. ``Idempotency-Key: K`` is the key
    of a single message; with a list, message i (from 1) is keyed ``K:i``; a message's
    own ``key`` wins over the header's."""
    single = isinstance(body, dict)
    items = [body] if single else body
    if not isinstance(items, list) or not items or not all(isinstance(item, dict) for item in items):
        raise InvalidMessageError("the body is a message object or a non-empty list of them")
    if idempotency_key is not None:
        # one message: its key; a list (a retried batch is retried whole): message i's key is K:i.
        # A message's own key wins over the header's.
        keys = [idempotency_key] if single else [f"{idempotency_key}:{n}" for n in range(1, len(items) + 1)]
        items = [item if item.get("key") is not None else {**item, "key": key} for item, key in zip(items, keys)]
    try:
        return [Message.from_dict(_integral_usage(item)) for item in items]
    except TranscriptError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a field of the wrong JSON type
        raise InvalidMessageError(f"not a message: {type(exc).__name__}: {exc}") from None


def only(body: Any, *names: str) -> Any:
    """``body`` when it is an object holding no other fields than ``names``, else a 400."""
    if not isinstance(body, dict):
        raise InvalidArgumentError("the body is a JSON object")
    unknown = sorted(set(body) - set(names))
    if unknown:
        raise InvalidArgumentError(f"unknown fields {unknown}: the body takes {', '.join(names)}")
    return body


def _integral_usage(item: dict[str, Any]) -> dict[str, Any]:
    """A usage count sent as ``12.0`` is the integer 12 (JSON has one number type)."""
    usage = item.get("usage")
    if not isinstance(usage, dict):
        return item
    counts = {k: int(v) for k, v in usage.items() if isinstance(v, float) and v.is_integer() and k.endswith("_tokens")}
    return {**item, "usage": {**usage, **counts}} if counts else item


def option(body: Any, name: str, kind: type, default: Any) -> Any:
    """``body[name]`` when it is of ``kind`` (or absent: ``default``), else a 400."""
    if not isinstance(body, dict):
        raise InvalidArgumentError("the body is a JSON object")
    value = body.get(name, default)
    if value is not default and not isinstance(value, kind):
        raise InvalidArgumentError(f"{name} must be a {kind.__name__}, got {value!r}")
    return value
