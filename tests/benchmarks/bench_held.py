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

import asyncio
import os
import statistics

from actors import CompactionPolicy, SessionRegistry
from persistence import open_store
from persistence.sqlite import writer
from tests.benchmarks.bench_agents import SESSIONS, time_boxed_async
from tests.benchmarks.timeboxed import Run, client_messages, printed_medians, rotating_rounds, round_arguments, time_boxed

MODES = ("append_async held", "append_async at once", "store (threads)")


def run_mode(directory: str, mode: str, seconds: float, tag: str) -> Run:
    store = open_store(os.path.join(directory, f"{tag}-{mode.split()[-1].strip('()')}.db"))
    ids = [f"{tag}-{k}" for k in range(SESSIONS)]
    try:
        if mode == "store (threads)":
            for sid in ids:
                store.create_session(sid)
            acked, elapsed, cpu = time_boxed([lambda m, s=sid: store.append(s, m) for sid in ids], seconds)
        else:
            writer.HOLD_SUBMITTED = mode == "append_async held"
            with SessionRegistry(store, policy=CompactionPolicy(max_resident=2 * SESSIONS)) as registry:
                handles = [registry.session(sid) for sid in ids]
                messages = [client_messages(k) for k in range(SESSIONS)]
                acked, elapsed, cpu = asyncio.run(time_boxed_async(
                    [h.append_async for h in handles], messages, seconds))
        stored = sum(len(store.transcript(sid)) for sid in ids)
    finally:
        writer.HOLD_SUBMITTED = True
        store.close()
    assert stored == acked, f"{mode}: {acked} acknowledged, {stored} stored"
    return Run(mode, acked, elapsed, cpu, 0)


def main() -> None:
    args = round_arguments(__doc__.splitlines()[0], rounds=8)
    runs = rotating_rounds(MODES, run_mode, rounds=args.rounds, seconds=args.seconds, directory=args.dir,
                           sessions=SESSIONS)
    rate = printed_medians(runs)
    for mode, base in (("append_async held", "append_async at once"), ("append_async held", "store (threads)"),
                       ("append_async at once", "store (threads)")):
        per_round = [a.rate / b.rate for a, b in zip(runs[mode], runs[base])]
        print(f"  {mode} / {base}: {rate[mode] / rate[base]:.2f} (per round: "
              f"{', '.join(f'{r:.2f}' for r in per_round)}; their median {statistics.median(per_round):.2f})")


if __name__ == "__main__":
    main()
