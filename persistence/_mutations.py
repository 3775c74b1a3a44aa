"""Test-only switches that turn a safety check off, so a test can prove the check
is what keeps a schedule safe (`actors.testing.mutation`).

``DISABLED`` is empty unless a test fills it; each check reads it through
`persistence._hooks.skipped`, one or two set lookups. The names:

- the commit-time checks of a compaction, one each: ``fence`` (the lease fence:
  holder, token, expiry), ``ended`` (the session ended since the snapshot),
  ``watermark`` (the snapshot reaches past the last message), ``snapshot`` (the
  snapshot's last message was retracted since), ``parent_open`` (a rotation's
  parent is still open when it ends it);
- ``fencing``: all five at once;
- ``join``: a compress call joining the attempt already in flight (it starts
  another instead).
"""

from __future__ import annotations

__all__ = ["COMMIT_CHECKS", "DISABLED", "NAMES", "is_disabled"]

COMMIT_CHECKS: frozenset[str] = frozenset({"fence", "ended", "watermark", "snapshot", "parent_open"})
NAMES: tuple[str, ...] = ("fencing", *sorted(COMMIT_CHECKS), "join")
DISABLED: set[str] = set()


def is_disabled(check: str) -> bool:
    """Whether ``check`` is off: by its own name, or by ``fencing`` for a commit check."""
    return check in DISABLED or ("fencing" in DISABLED and check in COMMIT_CHECKS)
