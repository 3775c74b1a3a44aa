"""Shared plumbing of the fault trials: worker processes, ledgers, recovery, the check.

A trial starts a real worker process (`tests.faults.worker`), injects one fault
(a kill point, SIGKILL, SIGSTOP, a terminated backend, a busy or full disk), then
recovers in this process with a fresh registry (the lease a dead worker left must
not block the session for longer than its TTL) and checks the store against the
worker's ledger: every acknowledged message accounted for, no fork, no seq gap,
no duplicated copy, no leaked lease.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from actors import CompactionPolicy, HeadTailCompressor, SessionRegistry
from actors.simulate._check import Ack, IntegrityReport, check_run
from actors.simulate._ledger import read_ledgers
from persistence import Store, open_store
from persistence._killpoints import ENV_KILL_AT
from protocol import CompressionStatus, Message

ROOT = Path(__file__).resolve().parents[2]
#: Lease TTL of the trial workers: short, so a dead holder's lease expires quickly.
TTL_S = 1.0
#: Longest a worker process may run before the trial calls it hung.
WORKER_TIMEOUT_S = 60.0
WORKER_HOLDER = "fault-worker"


def trials(default: int = 1) -> int:
    """Trials per case: ``SESSION_ACTORS_FAULT_TRIALS`` scales the bounded default sample."""
    return max(default, int(os.environ.get("SESSION_ACTORS_FAULT_TRIALS", default)))


def spawn_worker(
    db: str, session: str, ledger: Path, *, kill_at: str | None = None, args: Iterable[str] = ()
) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != ENV_KILL_AT}
    if kill_at:
        env[ENV_KILL_AT] = kill_at
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.faults.worker",
            db,
            session,
            str(ledger),
            "--holder",
            WORKER_HOLDER,
            "--ttl",
            str(TTL_S),
            *args,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    """Wait for a worker; its return code (-9: SIGKILL) and the tail of its stderr."""
    try:
        _, err = proc.communicate(timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return -999, "hung: " + err.decode(errors="replace")[-4000:]
    return proc.returncode, err.decode(errors="replace")[-4000:]


def ledger_acks(paths: Iterable[Path]) -> list[Ack]:
    return [Ack(line[1], line[2], line[3]) for line in read_ledgers(paths) if line[0] == "ack"]


@dataclass
class Tally:
    """Trials and failures of one kind of fault, with the first failures' reasons."""

    trials: int = 0
    faults: int = 0
    failures: list[str] = field(default_factory=list)

    def record(self, problems: list[str], *, faulted: bool = True) -> None:
        self.trials += 1
        self.faults += int(faulted)
        if problems:
            self.failures.append("; ".join(problems))


def wait_until(condition, timeout_s: float, step_s: float = 0.05) -> bool:
    """Poll ``condition`` until true or the deadline (for state in another process)."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            return False
        pause.wait(step_s)
    return True


def recover(store: Store, root: str, acks: list[Ack]) -> list[str]:
    """Continue the session after the fault as a new process would; problems found."""
    problems = []
    if not wait_until(lambda: not live_leases(store, root), TTL_S + 10):
        problems.append("the dead worker's lease never expired")
    policy = CompactionPolicy(lease_ttl_s=TTL_S * 5, keep_last=2, target_tokens=50, cooldown_s=0, ask_timeout_s=30.0)
    with SessionRegistry(
        store, compressor=HeadTailCompressor(keep_last=2), policy=policy, holder="fault-recovery"
    ) as registry:
        handle = registry.session(root, source="faults")
        for n in range(3):  # enough to compact even when the worker wrote nothing
            for m in handle.append([Message("user", f"after the fault {n}"), Message("assistant", f"recovered {n}")]):
                acks.append(Ack(root, m.id, m.text))
        outcome = handle.compress(force=True, mode="in_place")
        if outcome.status not in (CompressionStatus.COMPACTED, CompressionStatus.ROTATED):
            problems.append(f"compaction after the fault: {outcome.status.value} {outcome.reason}")
    return problems


def integrity_problems(store: Store, root: str, acks: list[Ack]) -> list[str]:
    """The simulate check on one lineage: every count must be 0. A lease a killed
    worker left behind is garbage once expired (reaped, not damage); a *live* one
    after every registry closed is a leak."""
    report: IntegrityReport = check_run(store, root, [root], acks)
    bad = {k: v for k, v in report.violations().items() if v and k != "leaked_leases"}
    live = live_leases(store, root)
    if live:
        bad["live_leases_left"] = len(live)
    return [f"{bad} {report.examples[:3]}"] if bad else []


def failed_calls(ledger: Path) -> list[tuple[str, str]]:
    """``(error kind, message text)`` of every append the worker saw fail."""
    return [(line[1], text) for line in read_ledgers([ledger]) if line[0] == "failed" for text in line[2]]


def check_after_failures(db: str, root: str, ledger: Path, failed: list[tuple[str, str]]) -> list[str]:
    """A failed call wrote nothing; then recover and check against the ledger."""
    acks = ledger_acks([ledger])
    store = open_store(db)
    try:
        texts = {r.text for r in lineage_rows(store, root)}
        written = [(kind, text) for kind, text in failed if text in texts]
        problems = [f"calls that failed wrote {written[:3]}"] if written else []
        problems += recover(store, root, acks)
        problems += integrity_problems(store, root, acks)
    finally:
        store.close()
    return problems


def live_leases(store: Store, root: str) -> list:
    """Leases on ``root``'s lineage that have not expired (held by someone right now)."""
    now = store.now()
    return [lease for lease in store.leases() if lease.session_id.startswith(root) and lease.expires_at > now]


def lineage_rows(store: Store, root: str) -> list:
    """Every row of every session of ``root``'s lineage."""
    rows, pending, seen = [], [root], set()
    while pending:
        sid = pending.pop()
        if sid in seen:
            continue
        seen.add(sid)
        rows += store.transcript(sid) + store.archive(sid)
        pending += [k.id for k in store.children(sid)]
    return rows


def lineage_compactions(store: Store, root: str) -> list:
    out, pending = [], [root]
    while pending:
        sid = pending.pop()
        out += store.compactions(sid)
        pending += [k.id for k in store.children(sid)]
    return out
