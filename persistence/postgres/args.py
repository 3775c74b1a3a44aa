"""Argument checks of the PostgreSQL store that `persistence.rows` does not cover.

Each raises `InvalidArgumentError` (a `ValueError`) before anything is sent to
the database.
"""

from __future__ import annotations

import math

from protocol import Cooldown, InvalidArgumentError

__all__ = ["check_cooldown_seconds", "check_pool_options", "check_snapshot", "check_text"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgumentError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def check_text(value: object, what: str, *, allow_empty: bool = False) -> str:
    """A str, non-empty unless ``allow_empty``."""
    if not isinstance(value, str) or (not allow_empty and not value):
        kind = "a str" if allow_empty else "a non-empty str"
        raise InvalidArgumentError(f"{what} must be {kind}, got {value!r}")
    return value


def check_pool_options(
    min_size: object, max_size: object, patience_s: object, connect_timeout_s: object,
    max_content_bytes: object,
) -> None:
    """The constructor options of `PostgresStore`."""
    if not (_is_int(min_size) and _is_int(max_size) and 0 <= min_size <= max_size and max_size >= 1):
        raise InvalidArgumentError(
            f"need ints 0 <= min_size <= max_size and max_size >= 1, got {min_size!r}, {max_size!r}"
        )
    for name, value in (("patience_s", patience_s), ("connect_timeout_s", connect_timeout_s)):
        if _finite(value, name) <= 0:
            raise InvalidArgumentError(f"{name} must be > 0, got {value!r}")
    if max_content_bytes is not None and not (_is_int(max_content_bytes) and max_content_bytes > 0):
        raise InvalidArgumentError(f"max_content_bytes must be a positive int, got {max_content_bytes!r}")


def check_cooldown_seconds(seconds: object) -> float:
    """A cooldown length: finite and >= 0."""
    value = _finite(seconds, "seconds")
    if value < 0:
        raise InvalidArgumentError(f"seconds must be >= 0, got {seconds!r}")
    return value


def check_snapshot(session_id: str, snapshot: object) -> Cooldown | None:
    """A cooldown snapshot to restore: None, or a `Cooldown` of this session."""
    if snapshot is None:
        return None
    if not isinstance(snapshot, Cooldown):
        raise InvalidArgumentError(f"snapshot must be a Cooldown or None, got {type(snapshot).__name__}")
    if snapshot.session_id != session_id:
        raise InvalidArgumentError(f"snapshot is for {snapshot.session_id!r}, not {session_id!r}")
    _finite(snapshot.until, "snapshot.until")
    if snapshot.error is not None:
        check_text(snapshot.error, "snapshot.error", allow_empty=True)
    return snapshot
