"""Appends/s with the writer's remembered seq counters, and with every batch reading them.

A batch of appends moves its sessions' seq counters. The SQLite writer remembers
where it moved them (``persistence.sqlite.bulk.RememberedCounters``), so the next
batch for the same sessions checks them inside its INSERT instead of reading them
first (its rows move them: schema 5's trigger): one statement less, and each
statement the writer runs lets go of the GIL and must win it back from the callers. This script measures both
in one process, side by side, for threads (``store.append`` from 64 threads, one
session each) and for ``append_async`` (64 tasks on one loop through a registry):
"read" runs with the memory patched to recall nothing (what every batch did
before). Rounds rotate which goes first, every run on a fresh database; medians,
per-round (paired) ratios and their median are printed.

    python -m tests.benchmarks.bench_counters
    python -m tests.benchmarks.bench_counters --rounds 12 --seconds 1

Not collected by pytest.
"""

from __future__ import annotations

from persistence.sqlite import bulk
from tests.benchmarks.bench_agents import SESSIONS, fresh_run
from tests.benchmarks.timeboxed import Run, measured_rounds, printed_ratios

MODES = ("threads remembered", "threads read", "append_async remembered", "append_async read")
COMPARED = (("threads remembered", "threads read"), ("append_async remembered", "append_async read"))


def run_mode(directory: str, mode: str, seconds: float, tag: str) -> Run:
    recall = bulk.RememberedCounters.recall
    if mode.endswith("read"):
        bulk.RememberedCounters.recall = lambda self, ids: None  # type: ignore[method-assign]
    try:
        return fresh_run(directory, mode, seconds, tag, "threads" if mode.startswith("threads") else "append_async")
    finally:
        bulk.RememberedCounters.recall = recall  # type: ignore[method-assign]


def main() -> None:
    printed_ratios(*measured_rounds(__doc__, MODES, run_mode, rounds=8, sessions=SESSIONS), COMPARED)


if __name__ == "__main__":
    main()
