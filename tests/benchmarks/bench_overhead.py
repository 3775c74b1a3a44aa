"""What a threaded registry append costs over the store, and why each microsecond counts.

Two measurements, printed side by side from one run, then what the OpenTelemetry hooks
add (`bench_telemetry`, three processes: the extra absent, the API alone, the SDK)
and what ``session-actors serve``'s append route costs over a bare FastAPI endpoint
(`bench_serve`, two servers and a client process):

1. **Per-call cost, one thread, a null store**: ``handle.append`` against
   ``store.append`` called directly, where the store's ``append`` returns a prebuilt
   answer at once (every other store method is a real SQLite store's). The
   difference is the registry's own Python per append: the handle, the actor's
   caller-runs checks and its bookkeeping. Rounds alternate the two; medians.
2. **Sensitivity, 64 threads, the real store**: durable appends/s of ``store.append``
   from 64 threads (one session each, group commit), with 0, 1, 3 and 10 us of
   extra pure Python per append run by each caller right after its append, next
   to the registry's ``handle.append`` on the same load. Under the GIL the callers
   queue behind each other (a convoy), so a few microseconds each caller holds
   the GIL cost far more than their own share of the throughput: this is why
   "the registry within 5% of the store" asks for well under a microsecond of
   overhead.

Runs rotate their order each round, every run on a fresh SQLite file; medians are
compared. Read the ratios: the machine may be shared. Not collected by pytest.

    python -m tests.benchmarks.bench_overhead
    python -m tests.benchmarks.bench_overhead --calls 100000 --seconds 2 --rounds 5
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from actors import CompactionPolicy, SessionRegistry
from persistence import open_store
from protocol import Message, StoredMessage
from tests.benchmarks import bench_serve, bench_telemetry
from tests.benchmarks.timeboxed import DISTINCT_MESSAGES, client_messages, time_boxed

SESSIONS = 64
EXTRA_US = (0, 1, 3, 10)


class NullStore:
    """A real SQLite store whose ``append`` answers at once with a prebuilt result."""

    def __init__(self, inner: Any, answer: list[StoredMessage]) -> None:
        self.inner = inner
        self._answer = answer

    def append(self, session_id: str, messages: Any, *, incarnation: str | None = None) -> list[StoredMessage]:
        return self._answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# -- 1. per-call cost ------------------------------------------------------------------


def per_call(calls: int, rounds: int, directory: str) -> None:
    store = open_store(os.path.join(directory, "null.db"))
    try:
        store.create_session("s")
        messages = client_messages(0)
        null = NullStore(store, store.append("s", messages[0]))
        with SessionRegistry(null, policy=CompactionPolicy(max_resident=8)) as registry:
            handle = registry.session("s")
            modes: dict[str, Callable[[Message], object]] = {
                "store.append": functools.partial(null.append, "s"),
                "handle.append": handle.append,
            }
            timings: dict[str, list[float]] = {mode: [] for mode in modes}
            for call in modes.values():  # warm-up, not recorded
                _per_call_us(call, messages, calls // 10)
            for number in range(rounds):
                order = list(modes) if number % 2 == 0 else list(reversed(modes))
                for mode in order:
                    timings[mode].append(_per_call_us(modes[mode], messages, calls))
    finally:
        store.close()
    print(f"1. per call, one thread, null store ({calls:,} calls a round, {rounds} alternating rounds)")
    for mode, values in timings.items():
        print(
            f"  {mode:<14} median {statistics.median(values):5.2f} us (rounds: {', '.join(f'{v:.2f}' for v in values)})"
        )
    extra = [h - s for h, s in zip(timings["handle.append"], timings["store.append"])]
    print(
        f"  handle.append - store.append: median {statistics.median(extra):+.2f} us "
        f"(rounds: {', '.join(f'{v:+.2f}' for v in extra)})"
    )


def _per_call_us(call: Callable[[Message], object], messages: Sequence[Message], calls: int) -> float:
    began = time.thread_time()  # this thread's CPU: time the machine gave to others is not counted
    for i in range(calls):
        call(messages[i % DISTINCT_MESSAGES])
    return (time.thread_time() - began) / calls * 1e6


# -- 2. sensitivity at 64 threads --------------------------------------------------------


def _burn(iterations: int) -> None:
    for _ in range(iterations):
        pass


def _iterations_per_us() -> float:
    """How many `_burn` loop turns make a microsecond on this machine (best of 5)."""
    turns = 200_000
    best = min(_timed(lambda: _burn(turns)) for _ in range(5))
    return turns / (best * 1e6)


def _timed(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def sensitivity(seconds: float, rounds: int, directory: str) -> None:
    per_us = _iterations_per_us()
    modes = [f"store +{us} us" for us in EXTRA_US] + ["registry"]
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    cpus: dict[str, list[float]] = {mode: [] for mode in modes}
    for mode in modes:  # warm-up, not recorded
        _threaded_run(directory, mode, min(seconds, 0.3), "warm", per_us)
    for number in range(rounds):
        shift = number % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            acked, elapsed, cpu = _threaded_run(directory, mode, seconds, f"r{number}", per_us)
            rates[mode].append(acked / elapsed)
            cpus[mode].append(cpu / acked * 1e6)
    print(
        f"2. durable appends/s, {SESSIONS} threads x one session each, extra pure Python per "
        f"append after it ({seconds:g} s a run, {rounds} rotating rounds)"
    )
    base = rates[modes[0]]
    for mode in modes:
        rate = statistics.median(rates[mode])
        ratio = [r / b for r, b in zip(rates[mode], base)]
        print(
            f"  {mode:<14} {rate:7,.0f}/s  cpu {statistics.median(cpus[mode]):4.0f} us/append  "
            f"{statistics.median(ratio):.2f} of +0 (rounds: {', '.join(f'{r:.2f}' for r in ratio)})"
        )


def _threaded_run(directory: str, mode: str, seconds: float, tag: str, per_us: float) -> tuple[int, float, float]:
    path = os.path.join(directory, f"{tag}-{mode.replace(' ', '').replace('+', 'p')}.db")
    ids = [f"{tag}-{k}" for k in range(SESSIONS)]
    store = open_store(path)
    try:
        if mode == "registry":
            with SessionRegistry(store, policy=CompactionPolicy(max_resident=2 * SESSIONS)) as registry:
                return time_boxed([registry.session(sid).append for sid in ids], seconds)
        for sid in ids:
            store.create_session(sid)
        turns = round(int(mode.split("+")[1].split()[0]) * per_us)

        def appender(sid: str) -> Callable[[Message], None]:
            def append(message: Message) -> None:
                store.append(sid, message)
                _burn(turns)

            return append

        return time_boxed([appender(sid) for sid in ids], seconds)
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50_000, help="calls per round of part 1")
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each run of part 2")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are compared")
    parser.add_argument("--dir", default=None, help="directory for the database files")
    args = parser.parse_args()
    print(f"load average {_load()} at the start")
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-overhead-") as directory:
        per_call(args.calls, max(args.rounds, 5), directory)
        sensitivity(args.seconds, args.rounds, directory)
    print("\nwhat the OpenTelemetry hooks cost an append (bench_telemetry):", flush=True)
    bench_telemetry.compare()
    print("\nwhat the HTTP append route costs over a bare FastAPI endpoint (bench_serve):", flush=True)
    bench_serve.compare(bench_serve.defaults())
    print(f"load average {_load()} at the end (other work on this machine shares its cores)")


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
