"""Session metadata and the arguments of the lifecycle operations, checked the same
way for every backend before anything is written.

Metadata is a JSON object with str keys, at most `MAX_DEPTH` levels deep (the
object itself is level 1), without NUL in any key or string, stored as compact
JSON text with sorted keys. Listing filters compare top-level values as JSON:
numbers by value, booleans never equal to numbers, strings exactly, and None
matches a missing key as well as ``null``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from protocol import InvalidArgumentError, InvalidMetadataError, SessionInfo
from protocol._checks import MAX_JSON_DEPTH, check_count
from protocol._messages import content_limit

__all__ = [
    "MAX_DEPTH",
    "MAX_RETENTION_S",
    "Listing",
    "check_after",
    "check_listing",
    "check_metadata",
    "check_metadata_filter",
    "check_metadata_patch",
    "check_older_than",
    "check_page_limit",
    "merge_metadata",
    "metadata_from_column",
]

#: JSON-able values nest at most this deep (as message content does).
MAX_DEPTH = MAX_JSON_DEPTH
#: The longest retention `prune_archive` accepts: 100 years, in seconds.
MAX_RETENTION_S = 100 * 365.25 * 86400

_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
_SCALARS = (str, int, float, bool, type(None))


def _check_text(text: str, where: str) -> None:
    if "\x00" in text:
        raise InvalidMetadataError(f"metadata {where} contains NUL")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMetadataError(f"metadata {where} is not valid Unicode: {exc}") from exc


def _check_value(value: Any, depth: int) -> None:
    """Walk one value (level ``depth``; each list or dict is a level): JSON types only,
    bounded depth, no NUL. Recursion stops past `MAX_DEPTH`, so a deep value never
    raises RecursionError."""
    if depth > MAX_DEPTH and isinstance(value, (Mapping, list, tuple)):
        raise InvalidMetadataError(f"metadata nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        _check_text(value, "string")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidMetadataError(f"metadata numbers must be finite, got {value!r}")
    elif isinstance(value, (bool, int, type(None))):
        pass
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidMetadataError(f"metadata keys must be str, got {key!r}")
            _check_text(key, "key")
            _check_value(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_value(item, depth + 1)
    else:
        raise InvalidMetadataError(f"metadata values must be JSON-able, got {type(value).__name__}")


def _encode(metadata: Mapping[str, Any]) -> str:
    try:
        text = _ENCODER.encode(dict(metadata))
    except (TypeError, ValueError) as exc:  # e.g. a nested mapping that is not a dict
        raise InvalidMetadataError(f"metadata is not storable JSON: {exc}") from exc
    if len(text.encode("utf-8")) > content_limit():
        raise InvalidMetadataError(f"metadata is over the {content_limit()}-byte limit")
    return text


def check_metadata(metadata: object) -> str:
    """Metadata for a new session (None: empty) as the JSON text to store."""
    if metadata is None:
        return "{}"
    if not isinstance(metadata, Mapping):
        raise InvalidMetadataError(f"metadata must be a mapping, got {type(metadata).__name__}")
    _check_value(metadata, 1)
    return _encode(metadata)


def check_metadata_patch(patch: object) -> dict[str, Any]:
    """An `update_metadata` patch: like metadata, where a None value removes its key."""
    if not isinstance(patch, Mapping):
        raise InvalidMetadataError(f"patch must be a mapping, got {type(patch).__name__}")
    _check_value(patch, 1)
    return dict(patch)


def merge_metadata(current: Mapping[str, Any], patch: Mapping[str, Any]) -> str:
    """``current`` with ``patch`` merged in (top level; None removes), as JSON text."""
    merged = {**current, **patch}
    return _encode({k: v for k, v in merged.items() if v is not None})


def metadata_from_column(value: Any) -> dict[str, Any]:
    """The stored column (JSON text, or a dict from a jsonb driver) as a dict."""
    if value is None:
        return {}
    return dict(value) if isinstance(value, Mapping) else json.loads(value)


def check_metadata_filter(metadata: object) -> str | None:
    """A `sessions(metadata=...)` filter as JSON text (None: no filter). Values are
    JSON scalars: str, a finite number, a bool or None."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise InvalidArgumentError(f"metadata filter must be a mapping, got {type(metadata).__name__}")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, _SCALARS):
            raise InvalidArgumentError(
                f"metadata filter entries must be str -> str/number/bool/None, got {key!r}: {value!r}"
            )
    _check_value(metadata, 1)
    return _encode(metadata) if metadata else None


def check_page_limit(limit: object) -> int | None:
    """A listing page size: None (all) or an int from 1 to `MAX_COUNT` (2**31 - 1)."""
    return None if limit is None else check_count(limit, "limit", minimum=1)


def check_after(after: object) -> SessionInfo | str | None:
    """``after``: None, the last `SessionInfo` of the previous page, or its id (a str)."""
    if after is None or isinstance(after, (SessionInfo, str)):
        return after
    raise InvalidArgumentError(f"after must be None, a SessionInfo or a session id, got {after!r}")


class Listing(NamedTuple):
    """The checked arguments of `Store.sessions`."""

    live: bool | None
    source: str | None
    metadata: str | None  # the filter as JSON text
    after: SessionInfo | str | None
    limit: int | None


def check_listing(live: object, source: object, metadata: object, after: object, limit: object) -> Listing:
    """Check every `Store.sessions` argument before any query runs."""
    if live is not None and not isinstance(live, bool):
        raise InvalidArgumentError(f"live must be None or a bool, got {live!r}")
    if source is not None and (not isinstance(source, str) or not source or "\x00" in source):
        raise InvalidArgumentError(f"source must be None or a non-empty str without NUL, got {source!r}")
    return Listing(live, source, check_metadata_filter(metadata), check_after(after), check_page_limit(limit))


def check_older_than(older_than_s: object, name: str = "older_than_s") -> float:
    """A retention (or idle) duration in seconds: a finite real number >= 0 (0 = everything)."""
    if isinstance(older_than_s, bool) or not isinstance(older_than_s, (int, float)):
        raise InvalidArgumentError(f"{name} must be a number of seconds, got {older_than_s!r}")
    if not math.isfinite(older_than_s) or not 0 <= older_than_s <= MAX_RETENTION_S:
        raise InvalidArgumentError(
            f"{name} must be finite, >= 0 and at most {MAX_RETENTION_S:.0f}, got {older_than_s!r}"
        )
    return float(older_than_s)
