"""How fast the harness explores, and how soon it finds a disabled safety check.

1. **Schedules/s**: every upstream incident (tests/scenarios/incidents.py) explored
   exhaustively, each schedule on a fresh SQLite file: schedules, steps, seconds.
2. **Schedules to find each mutation**: the commit fence and the in-flight join
   disabled (each alone, then both), in two races: two paths of one process rotating
   at once, and two processes rotating while the first may freeze past its lease.
   By seeded random schedules over ``--seeds`` seeds: how many schedules until the
   first failure (or none within ``--budget``) and whether its replay reproduces it;
   then how many of all the schedules fail.
3. **Bounded exploration of the three-path incident** (a turn, a review note, a
   rotation): complete exhaustive search with ``preemption_bound`` 0, 1 and 2, with
   the partial-order reduction and without (``reduce=False``), and plain exhaustive
   search given the same number of schedules (which does not finish): schedules,
   seconds, schedules/s.
4. **What the hooks cost** with no scheduler installed: the per-call time of the hook
   a hot path runs (`actors.scheduling.hooks.monotonic` next to `time.monotonic`).

    python -m tests.benchmarks harness [--seeds 10] [--budget 300] [--bounds 0 1 2] [--quick]

Not collected by pytest.
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit

from actors import CompactionPolicy
from actors.scheduling import hooks as _sched
from actors.testing import Harness, mutation
from tests.scenarios.incidents import INCIDENTS, _head_tail, three_paths


def schedules_per_second() -> None:
    print(f"{'incident':44} {'schedules':>9} {'steps':>7} {'seconds':>8} {'schedules/s':>11}")
    total_runs = total_s = 0.0
    for name, build in INCIDENTS.items():
        incident = build()
        with incident.harness as harness:
            report = harness.explore(
                incident.paths,
                review=incident.review,
                exhaustive=True,
                check=incident.check,
                failures_dir=None,
                **incident.options,
            )
        report.assert_ok()
        total_runs += report.schedules_run
        total_s += report.seconds
        rate = report.schedules_run / report.seconds
        print(f"{name:44} {report.schedules_run:9} {report.steps:7} {report.seconds:8.2f} {rate:11.1f}")
    print(f"{'all':44} {int(total_runs):9} {'':7} {total_s:8.2f} {total_runs / total_s:11.1f}")


def _rotate(h) -> None:
    h.compress(force=True, mode="rotate")


def _late_rotate(h) -> None:
    h.advance(20)  # after the first holder's lease (10 s) would have run out
    h.compress(force=True, mode="rotate")


def schedules_to_find(seeds: int, budget: int) -> None:
    """One process with two paths rotating (the join, then the lease, stop the second),
    and two processes, the first frozen for 100 s at a moment of the scheduler's choice
    (only the commit's fence stops its stale commit)."""
    one = ({"a": _rotate, "b": _rotate}, {})
    two = ({"w1": _rotate, "w2": _late_rotate}, {"processes": {"w1": "p1", "w2": "p2"}, "pauses": {"p1": 100.0}})
    policy = CompactionPolicy(max_tokens=None, keep_last=2, lease_ttl_s=10)
    print(f"\n{'scenario':32} {'disabled':16} {'seeds':>7} {'median schedules':>17} {'replays':>8} {'exhaustive':>16}")
    for label, (paths, options) in (("one process, two paths", one), ("two processes, p1 frozen", two)):
        for names in (("fencing",), ("join",), ("fencing", "join")):
            with _head_tail(policy) as harness, mutation(*names):
                needed, reproduced = [], 0
                for seed in range(seeds):
                    report = harness.explore(
                        paths, schedules=budget, seed=seed, stop_at_first=True, failures_dir=None, **options
                    )
                    if report.failures:
                        needed.append(report.schedules_run)
                        reproduced += _reproduces(harness, paths, report.failures[0].schedule, options)
                every = harness.explore(paths, exhaustive=True, failures_dir=None, **options)
            median = f"{statistics.median(needed):.0f}" if needed else f"none in {budget}"
            failing = sum(1 for s in every.schedules if any(f.schedule == s for f in every.failures))
            print(
                f"{label:32} {' + '.join(names):16} {len(needed):3}/{seeds:<3} {median:>17} "
                f"{reproduced:4}/{len(needed):<3} {failing:6}/{every.schedules_run:<4} fail"
            )


def _reproduces(harness: Harness, paths: dict, schedule: str, options: dict) -> bool:
    try:
        harness.replay(paths, schedule, **options)
    except AssertionError:
        return True
    return False


def bounded_three_paths(bounds: list[int]) -> None:
    """The three-path incident, each bound explored to the end, with and without the
    partial-order reduction (alternating); unbounded search with the same budget for
    comparison."""
    print(f"\n{'three paths':28} {'schedules':>9} {'complete':>9} {'seconds':>8} {'schedules/s':>11}")
    for bound in bounds:
        rows = []
        for reduce in (True, False):
            incident = three_paths()
            options = {**incident.options, "preemption_bound": bound, "reduce": reduce}
            with incident.harness as harness:
                bounded = harness.explore(
                    incident.paths, review=incident.review, exhaustive=True, max_schedules=100_000,
                    check=incident.check, failures_dir=None, restarts=False, **options,
                )  # fmt: skip
                bounded.assert_ok()
                if not reduce:
                    options.pop("preemption_bound")
                    plain = harness.explore(
                        incident.paths, review=incident.review, exhaustive=True,
                        max_schedules=bounded.schedules_run, check=incident.check, failures_dir=None,
                        restarts=False, **options,
                    )  # fmt: skip
            rows.append((f"preemption_bound={bound}" if reduce else "  reduce=False", bounded))
        rows.append(("  unbounded, same budget", plain))
        for label, report in rows:
            rate = report.schedules_run / report.seconds
            print(f"{label:28} {report.schedules_run:9} {report.complete!s:>9} {report.seconds:8.1f} {rate:11.1f}")


def reads_beside_a_write() -> None:
    """Where steps commute: two paths reading the transcript twice each, alone and
    beside a review note, explored to the end with and without the reduction."""

    def reader(h):
        h.transcript()
        h.transcript()

    def note(h):
        h.append("assistant", "background note")

    print(f"\n{'reads':34} {'schedules':>9} {'complete':>9} {'seconds':>8}")
    for name, paths in (("two readers", {"r1": reader, "r2": reader}), ("two readers, a note", {
        "r1": reader, "r2": reader, "note": note})):  # fmt: skip
        for reduce in (True, False):
            with _head_tail() as harness:
                report = harness.explore(
                    paths, review={"note"} & set(paths), exhaustive=True, max_schedules=100_000,
                    failures_dir=None, restarts=False, reduce=reduce,
                )  # fmt: skip
            report.assert_ok()
            label = f"{name}, reduce={reduce}"
            print(f"{label:34} {report.schedules_run:9} {report.complete!s:>9} {report.seconds:8.1f}")


def hook_cost() -> None:
    n = 1_000_000
    plain = min(timeit.repeat(time.monotonic, number=n, repeat=5)) / n * 1e9
    hooked = min(timeit.repeat(_sched.monotonic, number=n, repeat=5)) / n * 1e9
    point = min(timeit.repeat(lambda: _sched.point("x"), number=n, repeat=5)) / n * 1e9
    print(
        f"\nno scheduler: time.monotonic {plain:.0f} ns, _sched.monotonic {hooked:.0f} ns, _sched.point {point:.0f} ns"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds tried per mutation")
    parser.add_argument("--budget", type=int, default=300, help="random schedules per seed")
    parser.add_argument("--bounds", type=int, nargs="*", default=[0, 1, 2], help="preemption bounds to explore")
    parser.add_argument("--quick", action="store_true", help="only the bounded exploration and the hooks")
    args = parser.parse_args()
    if not args.quick:
        schedules_per_second()
        schedules_to_find(args.seeds, args.budget)
    reads_beside_a_write()
    bounded_three_paths(args.bounds)
    hook_cost()


if __name__ == "__main__":
    main()
