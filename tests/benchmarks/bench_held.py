"""Appends/s with a committed batch's answers held until the next COMMIT, or not.

The SQLite writer can answer a committed batch just before the next batch's COMMIT
(callers then run while the writer waits on the disk) or right after its own
(callers run while the writer builds the next batch). Two switches in
``persistence.sqlite.writer``, read at each batch, choose per kind of caller:

- ``HOLD_SUBMITTED`` (on): submitted appends, ``append_async`` from 64 asyncio
  tasks on one loop, each appending to its own session through a registry handle;
- ``HOLD_CHAINS`` (off): waiting threads, ``store.append`` from 64 threads, one
  session each (the store the goal names as the reference).

This script measures both ways of each in one process, side by side. Rounds
rotate which goes first, every run on a fresh database; medians, per-round
(paired) ratios and their median are printed.

    python -m tests.benchmarks.bench_held
    python -m tests.benchmarks.bench_held --rounds 12 --seconds 1

Not collected by pytest.
"""

from __future__ import annotations

from persistence.sqlite import writer
from tests.benchmarks.bench_agents import SESSIONS, fresh_run
from tests.benchmarks.timeboxed import Run, measured_rounds, printed_ratios

MODES = ("append_async held", "append_async at once", "threads at once", "threads held")
COMPARED = (("append_async held", "append_async at once"), ("threads at once", "threads held"),
            ("append_async held", "threads at once"))


def run_mode(directory: str, mode: str, seconds: float, tag: str) -> Run:
    held = mode.endswith("held")
    defaults = writer.HOLD_SUBMITTED, writer.HOLD_CHAINS
    try:
        if mode.startswith("threads"):
            writer.HOLD_CHAINS = held
            return fresh_run(directory, mode, seconds, tag, "threads")
        writer.HOLD_SUBMITTED = held
        return fresh_run(directory, mode, seconds, tag, "append_async")
    finally:
        writer.HOLD_SUBMITTED, writer.HOLD_CHAINS = defaults


def main() -> None:
    printed_ratios(*measured_rounds(__doc__, MODES, run_mode, rounds=8, sessions=SESSIONS), COMPARED)


if __name__ == "__main__":
    main()
