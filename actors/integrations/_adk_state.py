"""Where ADK's state lives in the store: session metadata, one key per state key.

A session's own state is in its metadata, app state (``app:``) in the metadata of a
session ``adk-app:...`` and user state (``user:``) in one ``adk-user:...`` per app and
user; ``temp:`` keys are never written. Each state key is a metadata key of its own
(``adk_state.<key>``) holding ``[value]``, so a delta is one top-level merge (two
writers of different keys never undo each other) and a None value stays a value.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from protocol import SessionExistsError, SessionInfo, SessionNotFoundError
from protocol.errors import InvalidArgumentError

__all__ = [
    "STATE_SOURCE",
    "app_state_id",
    "read_state",
    "scoped_state",
    "split_delta",
    "state_patch",
    "user_state_id",
    "write_scoped",
]

#: The ``source`` of the sessions holding app and user state (they hold no messages).
STATE_SOURCE = "adk-state"

_PREFIX = "adk_state."
APP, USER, TEMP = "app:", "user:", "temp:"


def app_state_id(app_name: str) -> str:
    return "adk-app:" + _digest([app_name])


def user_state_id(app_name: str, user_id: str) -> str:
    return "adk-user:" + _digest([app_name, user_id])


def _digest(parts: list[str]) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:48]


def split_delta(delta: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(app, user, session)`` parts of a state delta, prefixes stripped from the first
    two; ``temp:`` keys are dropped (they live in the caller's Session object only)."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in (delta or {}).items():
        if not isinstance(key, str):
            raise InvalidArgumentError(f"state keys must be strings, got {key!r}")
        if key.startswith(APP):
            app[key[len(APP) :]] = value
        elif key.startswith(USER):
            user[key[len(USER) :]] = value
        elif not key.startswith(TEMP):
            session[key] = value
    return app, user, session


def state_patch(state: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata patch that sets ``state``'s keys."""
    return {_PREFIX + key: [value] for key, value in state.items()}


def read_state(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The state kept in ``metadata``."""
    return {key[len(_PREFIX) :]: value[0] for key, value in metadata.items() if key.startswith(_PREFIX)}


def write_scoped(store: Any, session_id: str, state: Mapping[str, Any]) -> None:
    """Merge ``state`` into the app or user state kept by ``session_id`` (created on need)."""
    if not state:
        return
    patch = state_patch(state)
    try:
        store.update_metadata(session_id, patch)
        return
    except SessionNotFoundError:  # the first write of this scope: create it with the state
        pass
    try:
        store.create_session(session_id, source=STATE_SOURCE, metadata=patch)
    except SessionExistsError:  # created meanwhile by another writer: merge into it
        store.update_metadata(session_id, patch)


def scoped_state(store: Any, session_id: str) -> dict[str, Any]:
    info: SessionInfo | None = store.get_session(session_id)
    return {} if info is None else read_state(info.metadata)
