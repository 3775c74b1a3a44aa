"""Session starts: new sessions/s through one registry, with the peak thread count.

``--callers`` threads (default 16) share ``--sessions`` new ids (default 10,000);
each start is what a gateway does for a new conversation: ``registry.session(id)``
(the session is created) and one durable append through the handle. The
registry keeps at most ``max_resident`` actors (default 1,024), so most starts
also evict one. A sampler thread records the process's peak thread count.

Modes, side by side in one run (``--rounds`` rotating rounds, medians):

- ``registry sqlite``: a `SessionRegistry` on a fresh SQLite file;
- ``registry postgres``: the same on an isolated PostgreSQL schema (skipped when
  the server is unavailable);
- ``sdk SQLiteSession``: the OpenAI Agents SDK's own session on a fresh SQLite
  file: ``SQLiteSession(id, path)`` and one ``add_items`` (each caller thread
  runs its own event loop), ``close()`` afterwards;
- ``store sqlite``: the registry's own store calls for a start, made directly
  (``get_session``, ``create_session``, ``append``): the ceiling the registry
  can reach on this machine.

An actor owns no thread (it runs on the registry's pool only while it has
messages, and these appends run on the callers' threads), so the peak thread
count stays near the callers' own, whatever ``max_resident`` is.

The machine may be shared: compare the modes within one run. Not collected by
pytest. ``--only-registry --sessions 100000`` checks the 100,000-starts case.

    python -m tests.benchmarks.bench_starts
    python -m tests.benchmarks.bench_starts --only-registry --sessions 100000 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from actors import CompactionPolicy, SessionRegistry
from persistence import open_store
from protocol import Message
from tests.pg import isolated_postgres_url

CALLERS = 16


@dataclass(frozen=True)
class StartRun:
    mode: str
    starts: int
    seconds: float
    peak_threads: int  # over the threads alive before the run
    max_resident: int | None

    @property
    def rate(self) -> float:
        return self.starts / self.seconds

    def line(self) -> str:
        bound = "" if self.max_resident is None else f" (max_resident {self.max_resident})"
        return (
            f"{self.mode:<20} {self.starts:>7} starts in {self.seconds:6.2f}s = {self.rate:7,.0f}/s"
            f"  peak threads +{self.peak_threads}{bound}"
        )


def run_callers(
    ids: list[str], callers: int, start: Callable[[str], object], per_thread: Callable[[], object] | None = None
) -> tuple[float, int]:
    """Callers take ids from one shared iterator; (wall s, peak extra threads)."""
    source = iter(ids)
    take = threading.Lock()
    errors: list[BaseException] = []
    gate = threading.Barrier(callers + 1)
    done = threading.Event()
    baseline = threading.active_count()
    peak = [baseline]

    def sample() -> None:
        while not done.wait(0.002):
            peak[0] = max(peak[0], threading.active_count())

    def caller() -> None:
        try:
            gate.wait()
            while True:
                with take:
                    sid = next(source, None)
                if sid is None:
                    return
                start(sid)
        except BaseException as exc:  # reported after the run
            errors.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    sampler = threading.Thread(target=sample)
    for t in threads:
        t.start()
    sampler.start()
    gate.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    done.set()
    sampler.join()
    if errors:
        raise errors[0]
    return elapsed, peak[0] - baseline - callers - 1  # the callers and the sampler not counted


def registry_run(url: str, ids: list[str], callers: int, max_resident: int, mode: str) -> StartRun:
    store = open_store(url)
    try:
        with SessionRegistry(store, policy=CompactionPolicy(max_resident=max_resident)) as registry:

            def start(sid: str) -> None:
                registry.session(sid, source="bench").append("user", "hello")

            elapsed, peak = run_callers(ids, callers, start)
            assert registry.stats()["resident"] <= max_resident
        assert len(store.transcript(ids[-1])) == 1
    finally:
        store.close()
    return StartRun(mode, len(ids), elapsed, peak, max_resident)


def store_run(path: str, ids: list[str], callers: int) -> StartRun:
    store = open_store(path)
    hello = Message("user", "hello")
    try:

        def start(sid: str) -> None:
            if store.get_session(sid) is None:
                store.create_session(sid, source="bench")
            store.append(sid, hello)

        elapsed, peak = run_callers(ids, callers, start)
    finally:
        store.close()
    return StartRun("store sqlite", len(ids), elapsed, peak, None)


def sdk_run(path: str, ids: list[str], callers: int) -> StartRun:
    from agents import SQLiteSession

    SQLiteSession("warm", path).close()  # the schema, as the registry's store has it

    async def one(sid: str) -> None:
        session = SQLiteSession(sid, path)
        try:
            await session.add_items([{"role": "user", "content": "hello"}])
        finally:
            session.close()

    loops: dict[int, asyncio.AbstractEventLoop] = {}

    def start(sid: str) -> None:
        loop = loops.get(threading.get_ident())
        if loop is None:
            loop = loops[threading.get_ident()] = asyncio.new_event_loop()
        loop.run_until_complete(one(sid))

    try:
        elapsed, peak = run_callers(ids, callers, start)
    finally:
        for loop in loops.values():
            loop.close()
    return StartRun("sdk SQLiteSession", len(ids), elapsed, peak, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--callers", type=int, default=CALLERS)
    parser.add_argument("--max-resident", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only-registry",
        action="store_true",
        help="registry sqlite only (skip PostgreSQL, the SDK and the bare store)",
    )
    args = parser.parse_args()
    modes = (
        ["registry sqlite"]
        if args.only_registry
        else ["registry sqlite", "registry postgres", "sdk SQLiteSession", "store sqlite"]
    )
    runs: dict[str, list[StartRun]] = {m: [] for m in modes}
    counter = itertools.count()
    print(
        f"{args.sessions:,} new sessions, {args.callers} callers, one append each; {args.rounds} rounds, order rotating"
    )
    with tempfile.TemporaryDirectory(prefix="bench-starts-") as tmp:
        for number in range(args.rounds):
            for mode in modes[number % len(modes) :] + modes[: number % len(modes)]:
                ids = [f"start-{next(counter)}-{i}" for i in range(args.sessions)]
                if mode == "registry sqlite":
                    run = registry_run(str(Path(tmp) / f"r{number}.db"), ids, args.callers, args.max_resident, mode)
                elif mode == "registry postgres":
                    with isolated_postgres_url() as url:
                        run = registry_run(url, ids, args.callers, args.max_resident, mode)
                elif mode == "store sqlite":
                    run = store_run(str(Path(tmp) / f"s{number}.db"), ids, args.callers)
                else:
                    run = sdk_run(str(Path(tmp) / f"sdk{number}.db"), ids, args.callers)
                runs[mode].append(run)
                print(f"  round {number + 1}: {run.line()}")
    rate = {m: statistics.median(r.rate for r in rs) for m, rs in runs.items()}
    for mode in modes:
        print(
            f"  median {mode:<20} {rate[mode]:7,.0f} starts/s  peak threads +{max(r.peak_threads for r in runs[mode])}"
        )
    if "sdk SQLiteSession" in rate:
        for mode in ("registry sqlite", "registry postgres"):
            print(f"  {mode} / sdk SQLiteSession: {rate[mode] / rate['sdk SQLiteSession']:.2f}x")
    if "store sqlite" in rate:
        print(f"  registry sqlite / store sqlite: {rate['registry sqlite'] / rate['store sqlite']:.2f}")


if __name__ == "__main__":
    main()
