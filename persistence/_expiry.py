"""Expiry, shared by every backend: `Store.expire`'s argument checks and which idle
lineages its filters keep."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from protocol import InvalidArgumentError, SessionInfo
from protocol._checks import check_text

from ._metadata import check_metadata_filter, check_older_than

__all__ = ["ExpireArgs", "check_expire", "kept_roots"]


class ExpireArgs(NamedTuple):
    idle_for: float
    source: str | None
    metadata: Mapping[str, Any] | None
    dry_run: bool


def check_expire(idle_for_s: object, source: object, metadata: object, dry_run: object) -> ExpireArgs:
    """`Store.expire`'s arguments, checked (`InvalidArgumentError` otherwise)."""
    try:
        idle_for = check_older_than(idle_for_s)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(str(exc).replace("older_than_s", "idle_for_s")) from None
    if source is not None:
        check_text(source, "source")
    check_metadata_filter(metadata)
    if not isinstance(dry_run, bool):
        raise InvalidArgumentError(f"dry_run must be a bool, got {dry_run!r}")
    return ExpireArgs(idle_for, source, metadata, dry_run)  # type: ignore[arg-type]


def kept_roots(
    idle: Iterable[tuple[str, str]],
    metadata: Mapping[str, Any] | None,
    matching: Callable[[], list[SessionInfo]],
) -> list[str]:
    """The roots of the idle lineages (``(root, tip)`` rows) the metadata filter keeps:
    a lineage whose tip matches it (``matching()``: the sessions that do), as
    `Store.sessions` matches metadata. In root order, each once."""
    rows = list(idle)
    if metadata:
        tips = {info.id for info in matching()}
        rows = [(root, tip) for root, tip in rows if tip in tips]
    return list(dict.fromkeys(root for root, _ in rows))
