"""One entry point for the product benchmarks: ``python -m tests.benchmarks NAME [options]``.

``--list`` names them; ``all`` runs each with its default settings, one after another (never two
at once: they measure a shared machine). Each prints its own figures, ratios measured side by
side in one run.
"""

from __future__ import annotations

import importlib
import sys

#: name -> (module, what it measures)
BENCHMARKS = {
    "agents": (
        "bench_agents",
        "durable appends/s: registry, append_async, store, AgentsSession vs the SDK's SQLiteSession",
    ),
    "append": ("bench_append", "group commit vs one transaction per append"),
    "actor": ("bench_actor", "append latency through a handle vs the store; p99 during a compaction"),
    "archive": (
        "bench_archive",
        "search: append cost of the index, latency over 1,000,000 archived messages; erasing a lineage under load",
    ),
    "growth": (
        "bench_growth",
        "appends into 1,000,000 archived messages vs none; latest-N reads of a long transcript; bulk creates",
    ),
    "items": ("bench_items", "CPU per Responses item converted to a message and back"),
    "leases": ("bench_leases", "appends/s with turn leases vs without; turns/s across 2 processes; writes per turn"),
    "harness": ("bench_harness", "harness schedules/s on the upstream scenarios; schedules to find each mutation"),
    "overhead": (
        "bench_overhead",
        "CPU a registry append costs over the store; what the OpenTelemetry hooks and the HTTP route add",
    ),
    "peers": (
        "bench_peers",
        "multi-process chat turns vs other frameworks' session stores: lost/duplicated/split/forked, appends/s; --kill",
    ),
    "postgres": ("bench_postgres", "PostgreSQL appends: registry and store vs a naive psycopg loop"),
    "starts": ("bench_starts", "new sessions/s vs the SDK's SQLiteSession, peak threads"),
}


def run(name: str, argv: list[str]) -> None:
    module = importlib.import_module(f"tests.benchmarks.{BENCHMARKS[name][0]}")
    sys.argv = [f"python -m tests.benchmarks {name}", *argv]
    module.main()


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "--list"):
        for name, (_, what) in BENCHMARKS.items():
            print(f"{name:10} {what}")
        return 0
    name, rest = argv[0], argv[1:]
    if name == "all":
        for each in BENCHMARKS:
            print(f"\n== {each}: {BENCHMARKS[each][1]}", flush=True)
            run(each, rest)
        return 0
    if name not in BENCHMARKS:
        print(f"unknown benchmark {name!r}; one of: {', '.join(BENCHMARKS)}, all", file=sys.stderr)
        return 2
    run(name, rest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
