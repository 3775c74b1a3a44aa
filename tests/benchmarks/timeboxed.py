"""Shared by the append benchmarks: time-boxed concurrent clients and their figures.

Every client thread appends prebuilt messages until told to stop; a run reports
the appends acknowledged, wall time, process CPU time (all threads) and the
write transactions committed, so modes are compared on the same load.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from protocol import Message

__all__ = [
    "DISTINCT_MESSAGES",
    "Run",
    "client_messages",
    "load_average",
    "measured_rounds",
    "paired_ratios",
    "printed_medians",
    "printed_ratios",
    "rotating_rounds",
    "round_arguments",
    "time_boxed",
]

DISTINCT_MESSAGES = 32  # per client, reused in turn (messages are immutable values)


@dataclass(frozen=True)
class Run:
    """One time-boxed run of one mode."""

    mode: str
    appends: int
    seconds: float
    cpu_seconds: float
    transactions: int  # write transactions committed during the run

    @property
    def rate(self) -> float:
        return self.appends / self.seconds

    @property
    def cpu_us(self) -> float:
        """Process CPU time (every thread) per append, in microseconds."""
        return self.cpu_seconds / self.appends * 1e6

    @property
    def per_txn(self) -> float:
        return self.appends / max(1, self.transactions)

    def line(self) -> str:
        return (
            f"{self.mode:<20} {self.appends:>6} appends in {self.seconds:5.2f}s = "
            f"{self.rate:7,.0f}/s  cpu {self.cpu_us:5.0f} us/append  {self.per_txn:5.1f} appends/txn"
        )


def client_messages(k: int) -> list[Message]:
    """The same ~230-byte user messages in every mode, built before the start line."""
    return [Message("user", f"client {k} message {i} " + "x" * 200) for i in range(DISTINCT_MESSAGES)]


def time_boxed(appenders: list[Callable[[Message], object]], seconds: float) -> tuple[int, float, float]:
    """Client k calls ``appenders[k]`` until told to stop; returns (acknowledged,
    wall s, cpu s), the wall time ending when the last append returned."""
    start_line = threading.Barrier(len(appenders) + 1)
    stop = threading.Event()
    counts = [0] * len(appenders)
    errors: list[BaseException] = []

    def client(k: int) -> None:
        messages, append, done = client_messages(k), appenders[k], 0
        try:
            start_line.wait()
            while not stop.is_set():
                append(messages[done % DISTINCT_MESSAGES])
                done += 1
        except BaseException as exc:  # reported after the run
            errors.append(exc)
        counts[k] = done

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(appenders))]
    for t in threads:
        t.start()
    gc.collect()  # the setup's garbage (a registry's actors, the last run's) is not this run's
    start_line.wait()
    began, cpu_began = time.perf_counter(), time.process_time()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu_began
    if errors:
        raise errors[0]
    return sum(counts), elapsed, cpu


def rotating_rounds(
    modes: Sequence[str],
    run_mode: Callable[[str, str, float, str], Run],
    *,
    rounds: int,
    seconds: float,
    directory: str | None,
    sessions: int,
) -> dict[str, list[Run]]:
    """Run every mode once unrecorded (a warm-up), then ``rounds`` rounds that rotate
    which mode goes first (and run backwards every other round: what a mode leaves
    behind, a WAL to write back or threads winding down, must not always fall on
    the same next mode), printing each run; ``run_mode(directory, mode, seconds, tag)``
    runs one on fresh files in a temporary directory under ``directory``."""
    runs: dict[str, list[Run]] = {mode: [] for mode in modes}
    width = max(len(mode) for mode in modes)
    with tempfile.TemporaryDirectory(dir=directory, prefix="bench-") as scratch:
        for mode in modes:
            run_mode(scratch, mode, min(seconds, 0.3), "warm")
        print(
            f"durable appends/s, {sessions} sessions x one caller, {seconds:g} s per run, "
            f"{rounds} rounds, order rotating; load average {load_average()} at the start"
        )
        for number in range(rounds):
            shift = number % len(modes)
            order = [*modes[shift:], *modes[:shift]]
            if number % 2 and len(modes) > 2:  # a mode does not always follow the same one
                order.reverse()  # (two modes alternate by the rotation alone: reversed, one would always lead)
            for mode in order:
                run = run_mode(scratch, mode, seconds, f"r{number}")
                runs[mode].append(run)
                print(
                    f"  round {number + 1}: {run.mode:<{width}} {run.appends:>6} appends in "
                    f"{run.seconds:5.2f}s = {run.rate:7,.0f}/s  cpu {run.cpu_us:4.0f} us/append"
                )
    print(f"  load average {load_average()} at the end (other work on this machine shares its cores)")
    return runs


def round_arguments(description: str, rounds: int) -> argparse.Namespace:
    """``--seconds``, ``--rounds`` and ``--dir``, the options of a rotating-rounds benchmark."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each run")
    parser.add_argument("--rounds", type=int, default=rounds, help="rounds; medians are compared")
    parser.add_argument("--dir", default=None, help="directory for the database files")
    return parser.parse_args()


def printed_medians(runs: dict[str, list[Run]]) -> dict[str, float]:
    """Print each mode's median rate and CPU per append; returns the median rates."""
    width = max(len(mode) for mode in runs)
    rate = {mode: statistics.median(r.rate for r in rs) for mode, rs in runs.items()}
    for mode, rs in runs.items():
        print(
            f"  median {mode:<{width}} {rate[mode]:7,.0f}/s  cpu "
            f"{statistics.median(r.cpu_us for r in rs):4.0f} us/append"
        )
    return rate


def measured_rounds(
    doc: str, modes: Sequence[str], run_mode: Callable[[str, str, float, str], Run], *, rounds: int, sessions: int
) -> tuple[dict[str, list[Run]], dict[str, float]]:
    """A rotating-rounds benchmark's main part: its options (``doc``'s first line as the
    description), the rounds, the medians printed; returns the runs and the median rates."""
    args = round_arguments(doc.splitlines()[0], rounds)
    runs = rotating_rounds(
        modes, run_mode, rounds=args.rounds, seconds=args.seconds, directory=args.dir, sessions=sessions
    )
    return runs, printed_medians(runs)


def paired_ratios(runs: dict[str, list[Run]], mode: str, base: str) -> list[float]:
    """``mode``'s rate over ``base``'s, round by round (runs minutes apart at most)."""
    return [a.rate / b.rate for a, b in zip(runs[mode], runs[base])]


def printed_ratios(runs: dict[str, list[Run]], rate: dict[str, float], compared: Sequence[tuple[str, str]]) -> None:
    """Print each ``(mode, base)`` pair's ratio of medians, its per-round ratios and their median."""
    for mode, base in compared:
        per_round = paired_ratios(runs, mode, base)
        print(
            f"  {mode} / {base}: {rate[mode] / rate[base]:.2f} (per round: "
            f"{', '.join(f'{r:.2f}' for r in per_round)}; their median {statistics.median(per_round):.2f})"
        )


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())
