"""Argument checks every layer shares: durations, counts, texts, JSON nesting.

One rule per kind of value, so a policy, a store and a CLI option refuse the same
bad input the same way, at construction, before anything is written:

- a *duration* is a real number (not a bool), finite, at most `MAX_DURATION_S`
  (30 days) and > 0, or >= 0 where 0 has a documented meaning;
- a *count* is an int (not a bool) within its documented range (at most
  `MAX_COUNT` unless said otherwise);
- a *text* the store keeps is a str without NUL (PostgreSQL cannot store NUL in
  text, so SQLite must refuse it too: both backends behave alike);
- a *JSON-able* value nests at most `MAX_JSON_DEPTH` levels (the top value is
  level 1, each list or dict inside one more); deeper raises our error, never
  `RecursionError` (the check walks with its own stack).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .errors import InvalidArgumentError, TranscriptError

__all__ = [
    "MAX_COUNT",
    "MAX_DURATION_S",
    "MAX_JSON_DEPTH",
    "check_count",
    "check_duration",
    "check_json_value",
    "check_text",
    "encode_json_bounded",
]

MAX_DURATION_S = 30 * 24 * 3600.0  # 2,592,000 s
MAX_COUNT = 2**31 - 1
MAX_JSON_DEPTH = 64

_CONTAINERS = (dict, list, tuple)


def check_duration(value: object, name: str, *, allow_zero: bool = False) -> float:
    """``value`` as seconds: finite, <= 30 days, and > 0 (>= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(f"{name} must be a number of seconds, got {value!r}")
    low = ">= 0" if allow_zero else "> 0"
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if not math.isfinite(seconds) or seconds > MAX_DURATION_S or seconds < 0 or (seconds == 0 and not allow_zero):
        raise InvalidArgumentError(
            f"{name} must be finite, {low} and at most {MAX_DURATION_S:,.0f} s (30 days), got {value!r}"
        )
    return seconds


def check_count(value: object, name: str, *, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    """``value`` as an int (not a bool) in ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidArgumentError(f"{name} must be an int from {minimum} to {maximum}, got {value!r}")
    return value


def check_text(
    value: object, name: str, *, allow_empty: bool = False, error: type[TranscriptError] = InvalidArgumentError
) -> str:
    """A str without NUL (and non-empty unless ``allow_empty``)."""
    if not isinstance(value, str) or (not value and not allow_empty):
        kind = "a str" if allow_empty else "a non-empty str"
        raise error(f"{name} must be {kind}, got {value!r}")
    if "\x00" in value:
        raise error(f"{name} must not contain NUL characters")
    return value


def check_json_value(
    value: Any, what: str, *, error: type[TranscriptError] = InvalidArgumentError, forbid_nul: bool = False
) -> None:
    """Refuse nesting deeper than `MAX_JSON_DEPTH` (and, with ``forbid_nul``, NUL in any
    string, keys included). Walks with its own stack: any depth is safe to check.

    Types are checked by the encoder afterwards; this only looks into containers.
    """
    if not isinstance(value, _CONTAINERS):
        if forbid_nul and isinstance(value, str) and "\x00" in value:
            raise error(f"{what} must not contain NUL characters")
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise error(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in items:
            if forbid_nul and isinstance(key, str) and "\x00" in key:
                raise error(f"{what} must not contain NUL characters (in a key)")
            if isinstance(item, _CONTAINERS):
                stack.append((item, depth + 1))
            elif forbid_nul and isinstance(item, str) and "\x00" in item:
                raise error(f"{what} must not contain NUL characters")


def encode_json_bounded(
    encode: Callable[[Any], str], value: Any, what: str, *, error: type[TranscriptError] = InvalidArgumentError
) -> str:
    """``encode(value)`` (a JSON encoder's ``encode``), refusing with ``error`` a value
    nested deeper than `MAX_JSON_DEPTH`; the encoder's own errors propagate.

    The encoder runs first, in C: a text with no more opening brackets than
    `MAX_JSON_DEPTH` cannot nest deeper (brackets inside strings only make the
    count larger), so most values are never walked in Python. Otherwise, or when
    the encoder fails (a value nested too deep says so before anything else, as
    the walk reports it first), `check_json_value` decides.
    """
    try:
        text = encode(value)
    except (RecursionError, TypeError, ValueError):
        check_json_value(value, what, error=error)
        raise
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        check_json_value(value, what, error=error)
    return text
