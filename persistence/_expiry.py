"""Expiry, shared by every backend: `Store.expire`'s argument checks and which idle
lineages its filters keep."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from protocol import InvalidArgumentError, SessionInfo
from protocol._checks import check_text

from ._metadata import check_metadata_filter, check_older_than

__all__ = ["ExpireArgs", "check_expire", "expire_lineages"]

logger = logging.getLogger("session_actors.expiry")


class ExpireArgs(NamedTuple):
    idle_for: float
    source: str | None
    metadata: Mapping[str, Any] | None
    dry_run: bool


def check_expire(idle_for_s: object, source: object, metadata: object, dry_run: object) -> ExpireArgs:
    """`Store.expire`'s arguments, checked (`InvalidArgumentError` otherwise)."""
    idle_for = check_older_than(idle_for_s, "idle_for_s")
    if source is not None:
        check_text(source, "source")
    check_metadata_filter(metadata)
    if not isinstance(dry_run, bool):
        raise InvalidArgumentError(f"dry_run must be a bool, got {dry_run!r}")
    return ExpireArgs(idle_for, source, metadata, dry_run)  # type: ignore[arg-type]


def expire_lineages(
    args: ExpireArgs,
    idle: Iterable[tuple[str, str]],
    matching: Callable[[], list[SessionInfo]],
    erase_if_idle: Callable[[str], bool],
) -> list[str]:
    """`Store.expire` after the backend's look-up: the idle lineages (``(root, tip)``
    rows) the metadata filter keeps (``matching()``: the sessions that match it, as
    `Store.sessions` matches), each erased by ``erase_if_idle(root)`` in a transaction
    of its own that checks it again; the roots erased (with ``dry_run``: that would
    be). One transaction each: a long expiry never holds a lock for long."""
    rows = list(idle)
    if args.metadata:
        tips = {info.id for info in matching()}
        rows = [(root, tip) for root, tip in rows if tip in tips]
    roots = list(dict.fromkeys(root for root, _ in rows))
    if args.dry_run:
        return roots
    erased = [root for root in roots if erase_if_idle(root)]
    if erased:
        logger.info("expired %d lineage(s) idle for %.0f s", len(erased), args.idle_for)
    return erased
