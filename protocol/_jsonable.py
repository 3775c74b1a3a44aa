"""The JSON shapes of protocol values, shared by every front end that prints or
serves them (the CLI's ``--format json``, ``session-actors serve``): one shape per
value, so a script that reads one reads the other."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any

from ._messages import StoredMessage
from ._records import Lease, SessionInfo

__all__ = ["json_scalar", "lease_dict", "message_dict", "session_dict", "to_jsonable"]


def to_jsonable(value: Any) -> Any:
    """Dataclasses, enums and mappings to plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    return value


def session_dict(info: SessionInfo) -> dict[str, Any]:
    return to_jsonable(info) | {"live": info.live}


def message_dict(message: StoredMessage) -> dict[str, Any]:
    """``Message.to_dict()``'s shape plus where the store keeps it."""
    return {
        "id": message.id,
        "session_id": message.session_id,
        "seq": message.seq,
        "state": message.state,
        "created_at": message.created_at,
        "origin_id": message.origin_id,
        **message.to_dict(),
    }


def lease_dict(lease: Lease, now: float) -> dict[str, Any]:
    return to_jsonable(lease) | {"live": lease.expires_at > now}


def json_scalar(text: str) -> Any:
    """A metadata filter's value as written: read as JSON when it is a JSON scalar
    (``42``, ``true``, ``null``, ``"42"``), else the string itself (``tier=gold``)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return text if isinstance(value, (dict, list)) else value
