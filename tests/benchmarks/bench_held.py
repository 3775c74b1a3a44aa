"""``append_async`` appends/s with a batch's answers held until the next COMMIT, or not.

The SQLite writer answers a committed batch's submitted appends (``append_async``)
just before the next batch's COMMIT, so the event loop runs its tasks while the
writer waits on the disk (``persistence.sqlite.writer.HOLD_SUBMITTED``, read at
each batch). This script measures both ways in one process, side by side: 64
asyncio tasks on one loop, each appending to its own session through a registry
handle, with the answers held and answered right after their COMMIT (the
behaviour before); the store called directly from 64 threads runs alongside as
the reference the goal names. Rounds rotate which goes first, every run on a
fresh database; medians, per-round (paired) ratios and their median are printed.

    python -m tests.benchmarks.bench_held
    python -m tests.benchmarks.bench_held --rounds 12 --seconds 1

Not collected by pytest.
"""

from __future__ import annotations

import os
import statistics

from persistence import open_store
from persistence.sqlite import writer
from tests.benchmarks.bench_agents import SESSIONS, checked_run, direct_appends, registry_appends
from tests.benchmarks.timeboxed import Run, measured_rounds, paired_ratios

MODES = ("append_async held", "append_async at once", "store (threads)")


def run_mode(directory: str, mode: str, seconds: float, tag: str) -> Run:
    store = open_store(os.path.join(directory, f"{tag}-{mode.split()[-1].strip('()')}.db"))
    ids = [f"{tag}-{k}" for k in range(SESSIONS)]
    if mode == "store (threads)":
        return checked_run(mode, store, ids, lambda: direct_appends(store, ids, seconds))
    writer.HOLD_SUBMITTED = mode == "append_async held"
    try:
        return checked_run(mode, store, ids, lambda: registry_appends(store, ids, seconds, on_loop=True))
    finally:
        writer.HOLD_SUBMITTED = True


def main() -> None:
    runs, rate = measured_rounds(__doc__, MODES, run_mode, rounds=8, sessions=SESSIONS)
    for mode, base in (("append_async held", "append_async at once"), ("append_async held", "store (threads)"),
                       ("append_async at once", "store (threads)")):
        per_round = paired_ratios(runs, mode, base)
        print(f"  {mode} / {base}: {rate[mode] / rate[base]:.2f} (per round: "
              f"{', '.join(f'{r:.2f}' for r in per_round)}; their median {statistics.median(per_round):.2f})")


if __name__ == "__main__":
    main()
