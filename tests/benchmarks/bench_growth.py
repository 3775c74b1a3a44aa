"""The cost of growth: appends into a big database, reads of the latest messages of a
long transcript, and creating many sessions.

1. Appends as the database grows. 16 threads append to 16 new sessions (group
   commit, durable) of an empty SQLite file, and of one holding 1,000,000 archived
   messages in 100,000 sessions (built in bulk, as `bench_archive` builds its
   search corpus, its index included), in rotating rounds: the ratio of medians
   is what the data costs an append (goal: >= 0.9x). ``--postgres`` runs the same
   on two PostgreSQL schemas.
2. The latest messages of a long transcript. ``store.transcript(id, limit=20)``
   and ``AgentsSession.get_items(limit=20)`` (with the ``openai-agents`` extra) on
   sessions of 100 and of ``--live`` (default 50,000) live messages, and the whole
   transcript for contrast: medians of 21 reads, in milliseconds; the ratio long /
   short (goal: close to 1x, the cost follows the limit).
3. Creating sessions. ``--creates`` (default 100,000) new ids through the store:
   one ``create_session`` call at a time from one thread, from 16 threads (group
   commit), and in one ``create_sessions`` call; sessions/s (goal: > 2,000/s).
4. Compaction of a long live transcript. A session of ``--compact`` (default
   200,000) live messages compacted once through a registry (`HeadTailCompressor`),
   in a child process: seconds, and its peak RSS before and after.

The machine may be shared: compare modes within one run. Not collected by pytest.

    python -m tests.benchmarks growth                     # about 4 minutes
    python -m tests.benchmarks growth --messages 100000 --live 10000 --creates 20000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from persistence import open_store
from protocol import Message
from tests.benchmarks.bench_archive import append_run, build_postgres, build_sqlite
from tests.benchmarks.timeboxed import Run, printed_medians, printed_ratios, rotating_rounds

CALLERS = 16
LIMIT = 20
READS = 21


# -- part 1: appends into a big database ---------------------------------------------


@contextmanager
def grown_database(backend: str, directory: str, messages: int) -> Iterator[str]:
    """A database holding ``messages`` archived messages in sessions of 10."""
    started = time.perf_counter()
    if backend == "sqlite":
        url = f"{directory}/grown.db"
        build_sqlite(url, messages)
        print(f"built {url}: {messages:,} archived messages in {time.perf_counter() - started:.0f} s")
        yield url
        return
    from tests.pg import isolated_postgres_url

    with isolated_postgres_url() as url:
        build_postgres(url, messages)
        print(f"built a PostgreSQL schema: {messages:,} archived messages in {time.perf_counter() - started:.0f} s")
        yield url


def appends_as_data_grows(backend: str, messages: int, seconds: float, rounds: int) -> None:
    empty, grown = f"{backend} empty", f"{backend} {messages:,} archived"
    with (
        tempfile.TemporaryDirectory(prefix="bench-growth-") as directory,
        grown_database(backend, directory, messages) as grown_url,
    ):
        counter = iter(range(1_000_000))

        def run_mode(scratch: str, mode: str, secs: float, tag: str) -> Run:
            # every run appends to 16 sessions of its own: new ids in the grown database
            prefix = f"r{next(counter)}-"
            if mode == grown:
                return append_run(backend, grown_url, True, secs, mode, prefix=prefix)
            if backend == "sqlite":
                return append_run(backend, f"{scratch}/empty-{tag}.db", True, secs, mode, prefix=prefix)
            from tests.pg import isolated_postgres_url

            with isolated_postgres_url() as url:
                return append_run(backend, url, True, secs, mode, prefix=prefix)

        runs = rotating_rounds(
            [empty, grown], run_mode, rounds=rounds, seconds=seconds, directory=None, sessions=CALLERS
        )
        rate = printed_medians(runs)
        printed_ratios(runs, rate, [(grown, empty)])


# -- part 2: the latest messages of a long transcript -----------------------------------


def median_ms(read: Callable[[], object]) -> float:
    read()  # warm: a resident actor, cached statements
    times = []
    for _ in range(READS):
        started = time.perf_counter()
        read()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def latest_reads(url: str, live: int) -> None:
    lengths = (100, live)
    with open_store(url) as store:
        for length in lengths:
            store.create_session(f"long-{length}")
            batch = [Message("user" if i % 2 == 0 else "assistant", f"message {i} " + "x" * 200) for i in range(500)]
            for _ in range(length // 500 or 1):
                store.append(f"long-{length}", batch[: min(length, 500)])
        figures: dict[str, list[float]] = {}
        for length in lengths:
            sid = f"long-{length}"
            figures.setdefault(f"store.transcript(limit={LIMIT})", []).append(
                median_ms(lambda sid=sid: store.transcript(sid, limit=LIMIT))
            )
            figures.setdefault("store.transcript()", []).append(median_ms(lambda sid=sid: store.transcript(sid)))
        figures.update(agents_reads(url, lengths))
    print(f"\nmedian ms of {READS} reads, a session of {lengths[0]:,} vs {lengths[1]:,} live messages")
    for label, (short, long) in figures.items():
        print(f"  {label:<36} {short:9.2f} {long:9.2f}   long/short {long / short:6.2f}x")


def agents_reads(url: str, lengths: tuple[int, int]) -> dict[str, list[float]]:
    try:
        from actors import SessionRegistry
        from actors.integrations.openai_agents import AgentsSession
    except ImportError:  # the extra is not installed
        return {}
    with open_store(url) as store, SessionRegistry(store) as registry:
        loop = asyncio.new_event_loop()
        try:
            figures = []
            for length in lengths:
                session = AgentsSession(registry, f"long-{length}")
                figures.append(median_ms(lambda s=session: loop.run_until_complete(s.get_items(LIMIT))))
        finally:
            loop.close()
    return {f"AgentsSession.get_items({LIMIT})": figures}


# -- part 3: creating sessions ----------------------------------------------------------


def creates(directory: str, count: int) -> None:
    """Each way of creating ``count`` sessions, on a fresh SQLite file of its own."""
    print(f"\ncreating {count:,} sessions through the store (durable)")
    ways = (
        ("one create_session at a time", create_one_at_a_time),
        (f"create_session from {CALLERS} threads", create_from_threads),
        ("create_sessions, one call", create_in_one_call),
    )
    for n, (label, create) in enumerate(ways):
        with open_store(f"{directory}/creates-{n}.db") as store:
            ids = [f"c-{n}" for n in range(count)]
            started = time.perf_counter()
            create(store, ids)
            elapsed = time.perf_counter() - started
            assert len(store.sessions(limit=count + 1)) == count
        print(f"  {label:<36} {count / elapsed:10,.0f} sessions/s")


def create_one_at_a_time(store, ids: list[str]) -> None:
    for sid in ids:
        store.create_session(sid)


def create_from_threads(store, ids: list[str]) -> None:
    threads = [threading.Thread(target=create_one_at_a_time, args=(store, ids[k::CALLERS])) for k in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def create_in_one_call(store, ids: list[str]) -> None:
    store.create_sessions(ids)


# -- part 4: compaction of a long live transcript ------------------------------------------


def compaction_of_a_long_transcript(live: int) -> None:
    """In a child process of its own (its peak RSS is this part's alone): a session of
    ``live`` live messages (~230 bytes each), then one `compress()` through a registry
    with `HeadTailCompressor`, timed, with the peak RSS before and after."""
    import subprocess
    import sys

    code = f"from tests.benchmarks.bench_growth import compact_in_this_process; compact_in_this_process({live})"
    print(f"\ncompaction of a session of {live:,} live messages (a child process)")
    subprocess.run([sys.executable, "-c", code], check=True)


def peak_rss_mb() -> float:
    """This process's peak RSS: ``VmHWM`` on Linux (``ru_maxrss`` would carry over the
    parent's peak from before the exec), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def compact_in_this_process(live: int) -> None:
    import gc

    from actors import CompactionPolicy, HeadTailCompressor, SessionRegistry

    with tempfile.TemporaryDirectory(prefix="bench-growth-") as directory, open_store(f"{directory}/c.db") as store:
        store.create_session("long")
        for start in range(0, live, 1000):
            batch = [
                Message("user" if i % 2 == 0 else "assistant", f"message {i} " + "x" * 220)
                for i in range(start, min(start + 1000, live))
            ]
            store.append("long", batch)
        del batch
        gc.collect()
        before = peak_rss_mb()
        policy = CompactionPolicy(ask_timeout_s=600)
        with SessionRegistry(store, compressor=HeadTailCompressor(), policy=policy) as registry:
            started = time.perf_counter()
            outcome = registry.session("long").compress(force=True)
            elapsed = time.perf_counter() - started
        after = peak_rss_mb()
        print(f"  {outcome.status.value}: {elapsed:.1f} s, peak RSS {before:.0f} MB before, {after:.0f} MB after")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="archived messages of the grown database")
    parser.add_argument("--live", type=int, default=50_000, help="live messages of the long transcript")
    parser.add_argument("--creates", type=int, default=100_000)
    parser.add_argument("--compact", type=int, default=200_000, help="live messages of the compacted session")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL too (an isolated schema each)")
    args = parser.parse_args()
    backends = ["sqlite", *(["postgres"] if args.postgres else [])]
    for backend in backends:
        appends_as_data_grows(backend, args.messages, args.seconds, args.rounds)
    with tempfile.TemporaryDirectory(prefix="bench-growth-") as directory:
        latest_reads(f"{directory}/reads.db", args.live)
        creates(directory, args.creates)
    compaction_of_a_long_transcript(args.compact)


if __name__ == "__main__":
    main()
