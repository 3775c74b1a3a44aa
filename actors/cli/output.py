"""Terminal and JSON output for the ``session-actors`` CLI.

Rich renders tables and trees; it drops colour and markup by itself when stdout is
not a terminal. ``--json`` bypasses rich entirely: exactly one JSON document on stdout.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, TextIO

from rich.console import Console

from protocol import Lease, SessionInfo, StoredMessage

__all__ = [
    "console",
    "emit_json",
    "fmt_time",
    "lease_dict",
    "message_dict",
    "session_dict",
    "shorten",
    "to_jsonable",
]

#: Width used when stdout is not a terminal, so piped tables are not squeezed to 80 columns.
PIPE_WIDTH = 160


def console(stream: TextIO | None = None) -> Console:
    """A console on ``stream`` (default: the current ``sys.stdout``, so capture works)."""
    stream = sys.stdout if stream is None else stream
    is_tty = bool(getattr(stream, "isatty", lambda: False)())
    return Console(
        file=stream,
        highlight=False,
        markup=False,  # stored content may contain [brackets]: never interpret it
        soft_wrap=False,
        width=None if is_tty else PIPE_WIDTH,
        no_color=not is_tty,
        force_terminal=is_tty,
    )


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


def emit_json(document: Any, stream: TextIO | None = None) -> None:
    """Write one JSON document (and a newline) to stdout."""
    stream = sys.stdout if stream is None else stream
    stream.write(json.dumps(to_jsonable(document), indent=2, ensure_ascii=False))
    stream.write("\n")
    stream.flush()


def fmt_time(epoch: float | None) -> str:
    """Epoch seconds as a UTC timestamp (empty for None)."""
    if epoch is None:
        return ""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def shorten(text: str, width: int = 80) -> str:
    """One line, at most ``width`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def session_dict(info: SessionInfo) -> dict[str, Any]:
    return to_jsonable(info) | {"live": info.live}


def message_dict(message: StoredMessage) -> dict[str, Any]:
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
