"""Is the registry within 5% of the store? Many short pairs, side by side.

`bench_agents` compares five modes in a few 1.5 s rounds; on a shared VM one
round's registry / store ratio moves by 20-30% (the disk's fsync time, the other
vCPU's load), more than the 5% it should resolve. This script runs only the two:
``--pairs`` pairs of short runs, each run on a fresh SQLite file, the order
alternating A B, B A (so a drift in the machine's speed falls on both alike).
It prints every pair's ratio, their median with a bootstrap 95% confidence
interval, the ratio of the pooled rates, and how many pairs came out at 0.95 or
more. ``--how append_async`` compares 64 tasks on one event loop instead of 64
threads; ``--how threads`` runs the store against itself (an A/A test: the
method's own spread and bias).

    python -m tests.benchmarks.bench_parity
    python -m tests.benchmarks.bench_parity --pairs 40 --seconds 0.5
    python -m tests.benchmarks.bench_parity --how append_async

Not collected by pytest.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile

from tests.benchmarks.bench_agents import fresh_run
from tests.benchmarks.timeboxed import Run, load_average

RESAMPLES = 4000


def bootstrap_interval(ratios: list[float], *, seed: int = 0) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval for the median of ``ratios``."""
    draw = random.Random(seed)
    medians = sorted(statistics.median(draw.choices(ratios, k=len(ratios))) for _ in range(RESAMPLES))
    return medians[int(0.025 * RESAMPLES)], medians[int(0.975 * RESAMPLES) - 1]


def run_pairs(directory: str | None, how: str, pairs: int, seconds: float) -> list[tuple[Run, Run]]:
    """``pairs`` (registry, store) runs, the order alternating; each pair printed."""
    measured: list[tuple[Run, Run]] = []
    with tempfile.TemporaryDirectory(dir=directory, prefix="bench-") as scratch:
        fresh_run(scratch, "warm store", min(seconds, 0.3), "warm", "threads")
        fresh_run(scratch, "warm registry", min(seconds, 0.3), "warm", how)
        for number in range(pairs):
            order = (("registry", how), ("store", "threads"))
            if number % 2:
                order = order[::-1]
            got = {mode: fresh_run(scratch, mode, seconds, f"p{number}", kind) for mode, kind in order}
            registry, store = got["registry"], got["store"]
            measured.append((registry, store))
            print(f"  pair {number + 1:>2} ({order[0][0]} first): registry {registry.rate:7,.0f}/s "
                  f"{registry.cpu_us:3.0f} us  store {store.rate:7,.0f}/s {store.cpu_us:3.0f} us  "
                  f"ratio {registry.rate / store.rate:.3f}")
    return measured


def print_summary(measured: list[tuple[Run, Run]]) -> None:
    ratios = [r.rate / s.rate for r, s in measured]
    low, high = bootstrap_interval(ratios)
    pooled = (sum(r.appends for r, _ in measured) / sum(r.seconds for r, _ in measured)) / (
        sum(s.appends for _, s in measured) / sum(s.seconds for _, s in measured))
    extra_cpu = statistics.median(r.cpu_us - s.cpu_us for r, s in measured)
    print(f"  registry / store, {len(ratios)} pairs: median {statistics.median(ratios):.3f} "
          f"(95% interval {low:.3f}-{high:.3f}), pooled rates {pooled:.3f}, "
          f"{sum(r >= 0.95 for r in ratios)} of {len(ratios)} pairs >= 0.95; "
          f"CPU us/append over the store's: median {extra_cpu:+.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30, help="pairs of runs")
    parser.add_argument("--seconds", type=float, default=0.75, help="length of each run")
    parser.add_argument("--how", choices=("registry", "append_async", "threads"), default="registry",
                        help="the registry's callers: 64 threads or 64 tasks on one loop; 'threads' "
                             "runs the store in both places (an A/A test of the method itself)")
    parser.add_argument("--dir", default=None, help="directory for the database files")
    args = parser.parse_args()
    print(f"registry ({args.how}) vs store (64 threads), 64 sessions x one caller, {args.pairs} pairs of "
          f"{args.seconds:g} s runs, order alternating; load average {load_average()} at the start")
    measured = run_pairs(args.dir, args.how, args.pairs, args.seconds)
    print(f"  load average {load_average()} at the end")
    print_summary(measured)


if __name__ == "__main__":
    main()
