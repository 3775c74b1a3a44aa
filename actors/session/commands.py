"""The commands a handle sends, checked before anything is sent (a bad value is a
typed error that writes nothing). The HTTP service checks with the same function."""

from __future__ import annotations

from protocol import MODES, InvalidArgumentError
from protocol._commands import Compress
from protocol._records import CompactionMode

__all__ = ["compress_command"]


def compress_command(force: bool, mode: CompactionMode | None) -> Compress:
    if not isinstance(force, bool):
        raise InvalidArgumentError(f"force must be a bool, got {force!r}")
    if mode is not None and mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES} or None, got {mode!r}")
    return Compress(force=force, mode=mode)
