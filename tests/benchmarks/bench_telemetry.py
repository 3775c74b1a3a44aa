"""What the telemetry hooks cost on the append path.

    python3 tests/benchmarks/bench_telemetry.py [--rounds 9] [--appends 2000]

Three processes, one per situation: the ``otel`` extra absent (imports blocked), the API
installed without an SDK (the no-op default), and the SDK with an in-memory metric reader
(real aggregation). In each, one SQLite store appends with and without the hook
(``append.__wrapped__`` is the undecorated method), alternating rounds; the medians
give the ratio. A micro figure times the hook call alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("absent", "api", "sdk")


def _setup(variant: str) -> None:
    if variant == "absent":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]
    elif variant == "sdk":
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def _measure(variant: str, rounds: int, appends: int) -> None:
    _setup(variant)
    from persistence import _telemetry as telemetry
    from persistence import open_store
    from protocol import Message

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "bench.db"), synchronous="OFF")
        try:
            store.create_session("b")
            message = Message("user", "x" * 200)
            bare = type(store).append.__wrapped__
            modes = {"bare": lambda: bare(store, "b", message), "hooked": lambda: store.append("b", message)}
            times: dict[str, list[float]] = {name: [] for name in modes}
            for _ in range(rounds):
                for name, call in modes.items():  # alternating: noise hits both alike
                    started = time.perf_counter()
                    for _ in range(appends):
                        call()
                    times[name].append((time.perf_counter() - started) / appends * 1e6)
        finally:
            store.close()
        calls = 200_000
        started = time.perf_counter()
        for _ in range(calls):
            telemetry.appended(1, 0.0)
        hook_ns = (time.perf_counter() - started) / calls * 1e9
    bare_us, hooked_us = statistics.median(times["bare"]), statistics.median(times["hooked"])
    print(
        f"{variant:<7} enabled={telemetry.enabled()!s:<5} append bare {bare_us:6.1f} us, "
        f"hooked {hooked_us:6.1f} us, ratio {hooked_us / bare_us:5.3f}; "
        f"hook call alone {hook_ns:5.0f} ns",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--variant", choices=VARIANTS, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        _measure(args.variant, args.rounds, args.appends)
        return
    compare(args.rounds, args.appends)


def compare(rounds: int = 9, appends: int = 2000) -> None:
    """Each situation in a process of its own (what is imported is what is measured)."""
    root = str(Path(__file__).resolve().parents[2])
    for variant in VARIANTS:
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--variant",
                variant,
                "--rounds",
                str(rounds),
                "--appends",
                str(appends),
            ],
            check=True,
            cwd=root,
            env={**os.environ, "PYTHONPATH": root},
        )


if __name__ == "__main__":
    main()
