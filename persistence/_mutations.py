"""Test-only switches that turn a safety check off, so a test can prove the check
is what keeps a schedule safe (`actors.testing.mutation`).

``DISABLED`` is empty unless a test fills it; each check reads it with one set
lookup. The names:

- ``fencing``: the commit-time checks of a compaction. The lease fence, the
  session-ended check, the watermark and snapshot checks, and the "parent still
  open" check of a rotation (SQLite).
- ``join``: a compress call joining the attempt already in flight (it starts
  another instead).
"""

from __future__ import annotations

__all__ = ["DISABLED", "NAMES"]

NAMES: tuple[str, ...] = ("fencing", "join")
DISABLED: set[str] = set()
