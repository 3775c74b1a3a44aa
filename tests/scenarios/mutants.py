"""How many one-line bugs in the guarantee code the scenarios alone catch.

Each `Mutant` names its target by a file glob and a text snippet that occurs exactly
once in the files the glob matches (paths move as the code is restructured; a
snippet found nowhere is reported ``target not found``, one found twice
``ambiguous``), and the one-line change that plants the bug. For each mutant, one at
a time: the tree is copied to a scratch directory, the change is made there, and
every incident of tests/scenarios/incidents.py, then every scenario of
tests/scenarios/guarantees.py, is explored there exhaustively, in a
subprocess importing the scratch copy, until one breaks (an invariant, its own
check, its ``after``, an error, or an exploration that stops finishing). The
report: caught or not, by which incident and invariant, and after how many
schedules (counted over the incidents run until then).

    python -m tests.scenarios.mutants [--only NAME ...] [--list] [--timeout 900]

Not collected by pytest (a run takes minutes per mutant).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What the scratch copy leaves out.
_IGNORED = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".pytest_cache", ".hypothesis", "site", "*.db")


@dataclass(frozen=True)
class Mutant:
    name: str
    guarantee: str  # what the line guards
    glob: str  # the files to look in, from the repository root
    snippet: str  # occurs exactly once in them
    replacement: str
    skip: str = "postgres"  # files whose path holds this are not looked in (the scenarios run on SQLite)


MUTANTS: tuple[Mutant, ...] = (
    # -- the fence of a compaction commit
    Mutant(
        "fence-never-refuses",
        "fence predicate",
        "persistence/**/*.py",
        'if fence is None and not hooks.skipped("fence"):',
        "if False:",
    ),
    Mutant(
        "fence-ignores-expiry",
        "fence predicate",
        "persistence/sqlite/*.sql",
        "WHERE session_id = :session_id AND holder = :holder AND token = :token AND expires_at > :now\nRETURNING acquired_at",
        "WHERE session_id = :session_id AND holder = :holder AND token = :token\nRETURNING acquired_at",
    ),
    Mutant(
        "fence-ignores-token",
        "fence predicate",
        "persistence/sqlite/*.sql",
        "UPDATE leases SET expires_at = expires_at\nWHERE session_id = :session_id AND holder = :holder AND token = :token",
        "UPDATE leases SET expires_at = expires_at\nWHERE session_id = :session_id AND holder = :holder",
    ),
    Mutant(
        "lease-taken-while-held",
        "fence predicate (the lease it checks)",
        "persistence/sqlite/*.sql",
        "WHERE leases.holder IS NULL OR leases.expires_at <= :now OR leases.holder = :holder",
        "WHERE 1",
    ),
    Mutant(
        "snapshot-retract-not-checked",
        "watermark and snapshot checks",
        "persistence/**/*.py",
        '    if row is not None and row["state"] in ("retracted", "pruned"):',
        "    if False:",
    ),
    Mutant(
        "ended-parent-committed",
        "session-ended check",
        "persistence/**/*.py",
        '    if session["ended_at"] is not None and not hooks.skipped("ended"):',
        "    if False:",
    ),
    Mutant(
        "owned-not-checked",
        "holder's ownership before its commit",
        "actors/compaction/*.py",
        "        if not self._keeper.owned():",
        "        if False:",
    ),
    # -- the turn check in an append
    Mutant(
        "append-ignores-turn",
        "turn check in an append",
        "persistence/sqlite/*.sql",
        "  AND CASE WHEN :turn IS NULL THEN turn_holder IS NULL\n",
        "  AND CASE WHEN :turn IS NULL THEN 1\n",
    ),
    Mutant(
        "append-admits-dead-turn",
        "turn check in an append",
        "persistence/sqlite/*.sql",
        "ELSE coalesce(turn_token = :turn, 0) AND turn_holder IS NOT NULL AND turn_expires_at > :now END",
        "ELSE coalesce(turn_token = :turn, 0) AND turn_holder IS NOT NULL END",
    ),
    Mutant(
        "turn-opened-over-another",
        "turn check (opening)",
        "persistence/sqlite/*.sql",
        "  AND (turn_holder IS NULL OR (turn_holder = :holder AND turn_expires_at > :now))\nRETURNING id, turn_holder",
        "  AND 1\nRETURNING id, turn_holder",
    ),
    # -- the key claim
    Mutant(
        "key-claim-always-new",
        "key claim",
        "persistence/**/*.py",
        'if conn.execute(q["claim_key"], {"incarnation": conversation, "key": key}).rowcount == 1',
        'if conn.execute(q["claim_key"], {"incarnation": conversation, "key": key}).rowcount >= 0',
    ),
    Mutant(
        "key-redelivery-written-again",
        "key claim (plan)",
        "persistence/*.py",
        "        elif key is None or key in claimed:",
        "        elif True:",
    ),
    # -- the tail carry and its order
    Mutant(
        "tail-not-carried",
        "tail carry",
        "persistence/**/*.py",
        "    rows = [*params, *({k: r[k] for k in _COPIED} for r in tail)]",
        "    rows = [*params]",
    ),
    Mutant(
        "tail-reversed",
        "tail carry order",
        "persistence/**/*.py",
        'tail = sorted(cur.execute(q["supersede_tail"], archived).fetchall(), key=lambda r: r["seq"])',
        'tail = sorted(cur.execute(q["supersede_tail"], archived).fetchall(), key=lambda r: -r["seq"])',
    ),
    Mutant(
        "tail-before-summary",
        "tail carry order",
        "persistence/**/*.py",
        "    rows = [*params, *({k: r[k] for k in _COPIED} for r in tail)]",
        "    rows = [*({k: r[k] for k in _COPIED} for r in tail), *params]",
    ),
    # -- the open-turn cut of a snapshot
    Mutant(
        "snapshot-takes-open-turn",
        "open-turn cut of a snapshot",
        "protocol/*.py",
        "    end = max(0, len(messages) - max(0, turn_messages))",
        "    end = len(messages)",
    ),
    Mutant(
        "snapshot-ignores-first-seq",
        "open-turn cut of a snapshot",
        "protocol/*.py",
        "        end = min(end, next((i for i, m in enumerate(messages) if m.seq >= turn_first_seq), end))",
        "        end = end",
    ),
    Mutant(
        "commit-into-held-turn",
        "open-turn cut (the commit's check)",
        "persistence/**/*.py",
        '    if turn is not None and cur.execute(q["turn_in_snapshot"], params).fetchone() is not None:',
        "    if False:",
    ),
    # -- the incarnation checks
    Mutant(
        "incarnation-not-required",
        "incarnation check",
        "persistence/**/*.py",
        '    if incarnation is not None and row["incarnation"] != incarnation:\n        raise other_incarnation(session_id)',
        "    if False:\n        raise other_incarnation(session_id)",
    ),
    Mutant(
        "append-any-incarnation",
        "incarnation check in an append",
        "persistence/sqlite/*.sql",
        "WHERE id = :session_id AND ended_at IS NULL AND coalesce(:incarnation = incarnation, 1)\n  AND CASE",
        "WHERE id = :session_id AND ended_at IS NULL\n  AND CASE",
    ),
    # -- the tool-pair cut
    Mutant(
        "tail-starts-inside-tool-run",
        "tool-pair cut",
        "protocol/*.py",
        "    return not (in_tool_run(before) and in_tool_run(messages[index]))",
        "    return True",
    ),
    Mutant(
        "snapshot-takes-open-tool-run",
        "tool-pair cut (open run)",
        "protocol/*.py",
        "    return end if run_start is None else run_start",
        "    return end",
    ),
    Mutant(
        "tool-pairing-not-validated",
        "tool-pair cut (the result's check)",
        "protocol/*.py",
        "        if key not in tolerated:\n            return text",
        "        if False:\n            return text",
    ),
    # -- the rollback-at-the-end rule
    Mutant(
        "rollback-from-the-middle",
        "rollback-at-the-end rule",
        "persistence/sqlite/*.sql",
        "  AND seq > coalesce((SELECT max(o.seq) FROM messages AS o",
        "  AND seq > -1 + 0 * coalesce((SELECT max(o.seq) FROM messages AS o",
    ),
    # -- seq computation
    Mutant(
        "seq-reserved-short",
        "seq computation",
        "persistence/sqlite/*.sql",
        "UPDATE sessions SET next_seq = next_seq + :count WHERE id = :session_id\nRETURNING next_seq - :count AS first_seq",
        "UPDATE sessions SET next_seq = next_seq + :count - 1 WHERE id = :session_id\nRETURNING next_seq - :count AS first_seq",
    ),
    Mutant(
        "seq-append-off-by-one",
        "seq computation",
        "persistence/sqlite/*.sql",
        "UPDATE sessions SET next_seq = next_seq + :count\nWHERE id = :session_id AND ended_at IS NULL",
        "UPDATE sessions SET next_seq = next_seq + :count + 1\nWHERE id = :session_id AND ended_at IS NULL",
    ),
    # -- the in-flight join
    Mutant(
        "join-disabled",
        "in-flight join",
        "actors/**/*.py",
        '        if attempt is not None and attempt.in_flight and not skipped("join"):',
        "        if False:",
    ),
)


def locate(root: Path, mutant: Mutant) -> tuple[Path | None, str]:
    """The one file holding the snippet, or None and why not."""
    files = [p for p in sorted(root.glob(mutant.glob)) if p.is_file() and mutant.skip not in str(p.relative_to(root))]
    hits = [p for p in files if mutant.snippet in p.read_text()]
    counts = sum(p.read_text().count(mutant.snippet) for p in hits)
    if not hits:
        return None, f"target not found ({mutant.glob}: {mutant.snippet.splitlines()[0].strip()!r})"
    if counts > 1:
        return None, f"ambiguous: {counts} matches in {[str(p.relative_to(root)) for p in hits]}"
    return hits[0], str(hits[0].relative_to(root))


def run_incidents() -> dict:
    """In the (scratch) tree this runs from: explore every incident until one breaks."""
    from tests.scenarios.guarantees import GUARANTEES
    from tests.scenarios.incidents import INCIDENTS

    schedules = 0
    for name, build in {**INCIDENTS, **GUARANTEES}.items():
        try:
            incident = build()
            with incident.harness as harness:
                report = harness.explore(
                    incident.paths,
                    review=incident.review,
                    exhaustive=True,
                    max_schedules=5_000,
                    check=incident.check,
                    stop_at_first=True,
                    failures_dir=None,
                    **incident.options,
                )
            schedules += report.schedules_run
            if report.failures:
                failure = report.failures[0]
                return {"caught": True, "incident": name, "by": failure.invariant, "schedules": schedules}
            if not report.complete:
                return {"caught": True, "incident": name, "by": "incomplete", "schedules": schedules}
            incident.after()
        except Exception as exc:  # an error or a failed after(): the scenario test fails too
            return {"caught": True, "incident": name, "by": type(exc).__name__, "schedules": schedules}
    return {"caught": False, "schedules": schedules}


def try_mutant(mutant: Mutant, timeout: float) -> dict:
    found, where = locate(ROOT, mutant)
    if found is None:
        return {"mutant": mutant.name, "status": where}
    scratch = Path(tempfile.mkdtemp(prefix="session-mutant-"))
    try:
        tree = scratch / "tree"
        shutil.copytree(ROOT, tree, ignore=_IGNORED)
        target = tree / found.relative_to(ROOT)
        target.write_text(target.read_text().replace(mutant.snippet, mutant.replacement, 1))
        started = time.perf_counter()
        env_path = str(tree)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "tests.scenarios.mutants", "--run-incidents"],
                cwd=tree,
                env={**_env(), "PYTHONPATH": env_path},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"mutant": mutant.name, "file": where, "caught": True, "by": "timeout", "schedules": None}
        seconds = time.perf_counter() - started
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return {"mutant": mutant.name, "file": where, "caught": True, "by": f"crash: {tail[0]}", "seconds": seconds}
        return {"mutant": mutant.name, "file": where, **json.loads(lines[-1]), "seconds": round(seconds, 1)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="mutant names to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and where each lands, then stop")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per mutant")
    parser.add_argument("--run-incidents", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_incidents:
        print(json.dumps(run_incidents()), flush=True)
        return
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    if args.list:
        for mutant in chosen:
            print(f"{mutant.name:30} {mutant.guarantee:40} {locate(ROOT, mutant)[1]}")
        return
    results = []
    for mutant in chosen:
        result = try_mutant(mutant, args.timeout)
        results.append(result)
        print(json.dumps(result), flush=True)
    planted = [r for r in results if "caught" in r]
    caught = [r for r in planted if r["caught"]]
    print(
        f"\n{len(caught)} of {len(planted)} planted mutants caught by tests/scenarios alone "
        f"({len(results) - len(planted)} not planted: target not found or ambiguous)"
    )
    for r in caught:
        print(f"  {r['mutant']:30} {r.get('incident', '')!s:40} {r['by']:22} after {r.get('schedules')} schedule(s)")
    for r in planted:
        if not r["caught"]:
            print(f"  {r['mutant']:30} survived {r['schedules']} schedules")


if __name__ == "__main__":
    main()
