"""Appends/s with eventfd latches and with plain-lock latches.

A committed batch's callers are woken one by one (`persistence.latch.Latch`).
On a lock, the waking thread makes the futex wake-up with the GIL held (~6 us
on a 2-vCPU VM, an interrupt to the other vCPU); an eventfd's write lets go of
the GIL around it. This script measures both in one process, side by side, for
``store.append`` from 64 threads (one session each) and through a registry's
``handle.append``: "lock" runs with ``persistence.latch.MAX_EVENTFDS`` set to 0,
so every latch is a plain lock. Rounds rotate which goes first, every run on a
fresh database; medians, per-round (paired) ratios and their median are printed.

    python -m tests.benchmarks.bench_latch
    python -m tests.benchmarks.bench_latch --rounds 12 --seconds 1

Not collected by pytest.
"""

from __future__ import annotations

from unittest import mock

from persistence import latch
from tests.benchmarks.bench_agents import SESSIONS, fresh_run
from tests.benchmarks.timeboxed import Run, measured_rounds, printed_ratios

MODES = ("store eventfd", "store lock", "registry eventfd", "registry lock")
COMPARED = (("store eventfd", "store lock"), ("registry eventfd", "registry lock"))


def run_mode(directory: str, mode: str, seconds: float, tag: str) -> Run:
    how = "threads" if mode.startswith("store") else "registry"
    with mock.patch.object(latch, "MAX_EVENTFDS", 0 if mode.endswith("lock") else latch.MAX_EVENTFDS):
        return fresh_run(directory, mode, seconds, tag, how)


def main() -> None:
    printed_ratios(*measured_rounds(__doc__, MODES, run_mode, rounds=6, sessions=SESSIONS), COMPARED)


if __name__ == "__main__":
    main()
