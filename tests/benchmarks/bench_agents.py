"""Durable appends/s: the registry vs the OpenAI Agents SDK's ``SQLiteSession``.

64 sessions, one caller each, the same ~230-byte user message per append, every
mode on a fresh SQLite file on the same disk (the SDK's default pragmas: WAL; ours
``synchronous=FULL``):

- ``registry``: `SessionRegistry` handles, 64 caller threads (``handle.append``);
- ``registry async``: the same handles, 64 asyncio tasks on ONE event loop
  (``await handle.append_async``), no thread per call;
- ``store``: ``store.append`` called directly from 64 threads (group commit), the
  ceiling the registry is measured against;
- ``agents Session``: our `AgentsSession` over a registry, the drop-in for the SDK's
  session, 64 tasks on one event loop (``await session.add_items([item])``), the
  same items as the SDK's;
- ``sdk SQLiteSession``: the SDK's session, 64 tasks on one event loop
  (``await session.add_items([item])``), as the SDK is meant to be used.

Each run is time-boxed (``--seconds``); an unrecorded warm-up of each mode comes
first, then ``--rounds`` rounds rotate which mode goes first and the medians are
compared, with per-round ratios and their median (each round's modes ran minutes
apart at most, so a paired ratio shrugs off the machine's drift between rounds). The machine may be shared with other work:
read the ratios, measured side by side, rather than the absolute figures.
Needs the ``bench`` extra (``pip install 'session-actors[bench]'``). Not
collected by pytest.

    python -m tests.benchmarks.bench_agents
    python -m tests.benchmarks.bench_agents --seconds 2 --rounds 7
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from actors import CompactionPolicy, SessionRegistry
from persistence import Store, open_store
from tests.benchmarks.timeboxed import (
    DISTINCT_MESSAGES,
    Run,
    client_messages,
    measured_rounds,
    paired_ratios,
    time_boxed,
)

SESSIONS = 64
MODES = ("registry", "registry async", "store", "agents Session", "sdk SQLiteSession")


async def time_boxed_async(
    appenders: list[Callable[[object], Awaitable[object]]], messages: list[list[object]], seconds: float
) -> tuple[int, float, float]:
    """Task k awaits ``appenders[k]`` until the time is up; (acknowledged, wall s, cpu s)."""
    stop = asyncio.Event()
    counts = [0] * len(appenders)

    async def client(k: int) -> None:
        done = 0
        while not stop.is_set():
            await appenders[k](messages[k][done % DISTINCT_MESSAGES])
            done += 1
        counts[k] = done

    gc.collect()  # the setup's garbage (a registry's actors, the last run's) is not this run's
    began, cpu_began = time.perf_counter(), time.process_time()
    tasks = [asyncio.ensure_future(client(k)) for k in range(len(appenders))]
    await asyncio.sleep(seconds)  # the time box itself
    stop.set()
    await asyncio.gather(*tasks)
    return sum(counts), time.perf_counter() - began, time.process_time() - cpu_began


def run_mode(directory: str, mode: str, seconds: float, tag: str) -> Run:
    if mode == "sdk SQLiteSession":
        return sdk_run(run_path(directory, mode, tag), run_ids(tag), seconds)
    if mode == "agents Session":
        return agents_session_run(open_store(run_path(directory, mode, tag)), run_ids(tag), seconds)
    how = {"store": "threads", "registry": "registry", "registry async": "append_async"}[mode]
    return fresh_run(directory, mode, seconds, tag, how)


def run_path(directory: str, mode: str, tag: str) -> str:
    return os.path.join(directory, f"{tag}-{mode.replace(' ', '-')}.db")


def run_ids(tag: str) -> list[str]:
    return [f"{tag}-{k}" for k in range(SESSIONS)]


def fresh_run(directory: str, mode: str, seconds: float, tag: str, how: str) -> Run:
    """One time-boxed run of ``mode`` on a fresh SQLite store, held to every
    acknowledged append: ``how`` is ``"threads"`` (``store.append``, a thread per
    session), ``"registry"`` (``handle.append``, a thread per session) or
    ``"append_async"`` (registry handles, one task per session on one loop)."""
    store, ids = open_store(run_path(directory, mode, tag)), run_ids(tag)
    if how == "threads":
        return checked_run(mode, store, ids, lambda: direct_appends(store, ids, seconds))
    return checked_run(mode, store, ids, lambda: registry_appends(store, ids, seconds, on_loop=how == "append_async"))


def direct_appends(store: Store, ids: list[str], seconds: float) -> tuple[int, float, float]:
    """One thread per session calls ``store.append`` (the sessions created first)."""
    for sid in ids:
        store.create_session(sid)
    return time_boxed([lambda m, s=sid: store.append(s, m) for sid in ids], seconds)


def registry_appends(store: Store, ids: list[str], seconds: float, *, on_loop: bool) -> tuple[int, float, float]:
    """Through registry handles: one thread per session (``append``), or with ``on_loop``
    one task per session on one event loop (``append_async``). The sessions are
    started first (created, their actors resident), as `direct_appends` creates its
    sessions before the start line: the time box measures appends, not starts
    (`bench_starts` measures those)."""
    with SessionRegistry(store, policy=CompactionPolicy(max_resident=2 * len(ids))) as registry:
        handles = [registry.session(sid) for sid in ids]
        for handle in handles:
            handle.transcript()  # starts the session's actor (and creates the session)
        if not on_loop:
            return time_boxed([h.append for h in handles], seconds)
        messages = [client_messages(k) for k in range(len(ids))]
        return asyncio.run(time_boxed_async([h.append_async for h in handles], messages, seconds))


def checked_run(mode: str, store: Store, ids: list[str], appends: Callable[[], tuple[int, float, float]]) -> Run:
    """Run ``appends`` on ``store`` (closed after it), then hold it to every
    acknowledged append: as many rows read back."""
    try:
        acked, elapsed, cpu = appends()
        stored = sum(len(store.transcript(sid)) for sid in ids)
    finally:
        store.close()
    assert stored == acked, f"{mode}: {acked} acknowledged, {stored} stored"
    return Run(mode, acked, elapsed, cpu, 0)


def sdk_items(k: int) -> list[dict[str, str]]:
    """Client ``k``'s messages as the SDK's input items (the same text as every mode's)."""
    return [{"role": m.role, "content": m.content} for m in client_messages(k)]


def agents_session_run(store: Store, ids: list[str], seconds: float) -> Run:
    """Our `AgentsSession` (over a registry on ``store``), used as the SDK's session is."""
    from actors.integrations.openai_agents import AgentsSession

    try:
        with SessionRegistry(store, policy=CompactionPolicy(max_resident=2 * SESSIONS)) as registry:
            return items_run("agents Session", [AgentsSession(registry, sid) for sid in ids], seconds)
    finally:
        store.close()


def sdk_run(path: str, ids: list[str], seconds: float) -> Run:
    from agents import SQLiteSession

    return items_run("sdk SQLiteSession", [SQLiteSession(sid, path) for sid in ids], seconds)


def items_run(mode: str, sessions: list[Any], seconds: float) -> Run:
    """Task k awaits ``sessions[k].add_items([item])`` (the SDK's ``Session`` protocol) on
    one event loop until the time is up; every acknowledged item must read back."""

    async def main() -> tuple[int, float, float, int]:
        try:
            acked, elapsed, cpu = await time_boxed_async(
                [lambda item, s=s: s.add_items([item]) for s in sessions],
                [sdk_items(k) for k in range(SESSIONS)],
                seconds,
            )
            stored = sum([len(await s.get_items()) for s in sessions])
        finally:
            for s in sessions:
                s.close()
        return acked, elapsed, cpu, stored

    acked, elapsed, cpu, stored = asyncio.run(main())
    assert stored == acked, f"{mode}: {acked} acknowledged, {stored} stored"
    return Run(mode, acked, elapsed, cpu, 0)


def main() -> None:
    runs, rate = measured_rounds(__doc__, MODES, run_mode, rounds=5, sessions=SESSIONS)
    for mode in ("registry", "registry async", "store", "agents Session"):
        per_round = paired_ratios(runs, mode, "sdk SQLiteSession")
        print(
            f"  {mode} / sdk SQLiteSession: {rate[mode] / rate['sdk SQLiteSession']:.1f}x "
            f"(per round: {', '.join(f'{r:.1f}' for r in per_round)}; their median "
            f"{statistics.median(per_round):.1f}x)"
        )
    for mode in ("registry", "registry async"):
        per_round = paired_ratios(runs, mode, "store")
        extra_cpu = [a.cpu_us - b.cpu_us for a, b in zip(runs[mode], runs["store"])]
        print(
            f"  {mode} / store: {rate[mode] / rate['store']:.2f} "
            f"(per round: {', '.join(f'{r:.2f}' for r in per_round)}; their median "
            f"{statistics.median(per_round):.2f}); CPU us/append over the store's: "
            f"median {statistics.median(extra_cpu):+.0f} (per round: {', '.join(f'{c:+.0f}' for c in extra_cpu)})"
        )


if __name__ == "__main__":
    main()
