"""Failures a person can use: shrunk, saved, replayed first on the next run.

*Shrinking.* A failing schedule's decisions ``d1 > ... > dn``: the run that follows
the first ``k`` of them and then lets the running thread go on (no preemption, no
pause) is a schedule with fewer switches. The smallest ``k`` whose run still
breaks the same invariant is found by bisection (a handful of runs), and kept when
its schedule is no longer than the original.

*Saving.* Each exploration has a key (its session, its paths' names and
functions, the review set, processes and pauses); the schedules that failed are
kept in ``<failures_dir>/<key>.json`` and replayed before anything else on the next
run with that key. One that no longer fits the paths, or no longer fails, is
dropped.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_FAILURES_DIR", "SavedFailures", "exploration_key", "shrink"]

#: Where failures are kept unless ``explore(failures_dir=...)`` says otherwise (relative
#: to the working directory).
DEFAULT_FAILURES_DIR = ".session-actors-harness"

#: Runs one shrink may take at most.
SHRINK_RUNS = 12


def exploration_key(
    session_id: str,
    paths: Mapping[str, Callable[..., object]],
    review: Iterable[str],
    process_of: Mapping[str, str],
    pauses: Mapping[str, float],
) -> str:
    """A file name that stays the same across runs of one exploration."""
    described = {
        "session": session_id,
        "paths": {
            name: f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"
            for name, fn in paths.items()
        },
        "review": sorted(review),
        "processes": dict(sorted(process_of.items())),
        "pauses": dict(sorted(pauses.items())),
    }
    digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]
    return f"{'-'.join(sorted(paths))[:40]}-{digest}"


class SavedFailures:
    """The schedules saved for one exploration key (none when ``folder`` is None)."""

    def __init__(self, folder: str | os.PathLike[str] | None, key: str) -> None:
        self._file = None if folder is None else Path(folder) / f"{key}.json"

    def load(self) -> list[str]:
        if self._file is None or not self._file.is_file():
            return []
        try:
            found: Any = json.loads(self._file.read_text())
        except (OSError, ValueError):  # unreadable: start afresh, it is rewritten below
            return []
        schedules = found.get("schedules") if isinstance(found, dict) else None
        return [s for s in schedules if isinstance(s, str)] if isinstance(schedules, list) else []

    def save(self, schedules: Iterable[str]) -> None:
        if self._file is None:
            return
        unique = sorted(set(schedules))
        if not unique:
            self._file.unlink(missing_ok=True)
            return
        self._file.parent.mkdir(parents=True, exist_ok=True)
        self._file.write_text(json.dumps({"schedules": unique}, indent=1) + "\n")


def shrink(decisions: list[str], still_fails: Callable[[list[str]], list[str] | None]) -> list[str]:
    """The shortest-found schedule failing as ``decisions`` do; ``still_fails(prefix)``
    runs the prefix then steadily, returning the run's decisions when it fails the
    same way, else None."""
    best = decisions
    low, high = 0, len(decisions)  # a prefix of `high` decisions fails (the whole schedule)
    runs = 0
    while low < high and runs < SHRINK_RUNS:
        middle = (low + high) // 2
        runs += 1
        found = still_fails(decisions[:middle])
        if found is not None:
            high = middle
            if len(found) <= len(best):
                best = found
        else:
            low = middle + 1
    return best
