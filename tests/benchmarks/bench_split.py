"""Appends/s of ``append_async`` with the batch of every answer owed split in two, or not.

With 64 tasks on one event loop nearly every task's append rides in the same
batch, so the loop and the SQLite writer take turns: the loop idles while the
batch is written. The writer splits such a batch in two halves
(``persistence.sqlite.writer.SPLIT_SUBMITTED``, on; only while its commits wait
less than half the time the loop took to send the batch): the loop runs the first
half's answers while the second half is written, and the halves go on as two
groups taking turns. This script measures ``append_async`` from 64 tasks on one
loop through a registry both ways, next to ``store.append`` from 64 threads (the
store the goal names), in one process, side by side. Rounds rotate which goes
first, every run on a fresh database; medians, per-round (paired) ratios and
their median are printed.

    python -m tests.benchmarks.bench_split
    python -m tests.benchmarks.bench_split --rounds 10 --seconds 1

Not collected by pytest.
"""

from __future__ import annotations

from unittest import mock

from persistence.sqlite import writer
from tests.benchmarks.bench_agents import SESSIONS, fresh_run
from tests.benchmarks.timeboxed import Run, measured_rounds, printed_ratios

MODES = ("append_async split", "append_async whole", "store threads")
COMPARED = (("append_async split", "append_async whole"), ("append_async split", "store threads"),
            ("append_async whole", "store threads"))


def run_mode(directory: str, mode: str, seconds: float, tag: str) -> Run:
    if mode == "store threads":
        return fresh_run(directory, mode, seconds, tag, "threads")
    with mock.patch.object(writer, "SPLIT_SUBMITTED", mode.endswith("split")):  # read at each batch
        return fresh_run(directory, mode, seconds, tag, "append_async")


def main() -> None:
    printed_ratios(*measured_rounds(__doc__, MODES, run_mode, rounds=8, sessions=SESSIONS), COMPARED)


if __name__ == "__main__":
    main()
