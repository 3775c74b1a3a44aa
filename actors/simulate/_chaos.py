"""``simulate --chaos``: kill and freeze worker processes while the workload runs.

A supervisor runs ``--processes`` chaos workers (`chaos_worker`) on one database
and makes at least ``faults`` faults, at least one of each kind, spread over the
run (fault *i* of *n* once about ``i/(n+1)`` of the turns are done; a workload too
short keeps going until every fault happened):

- **kill**: SIGKILL a worker. Aimed *mid-summary*, it hits a worker holding a live
  compaction lease (its compressor is running, or it is committing); else a random
  worker at a random moment. The worker started in place of a killed one is armed,
  every other time, with a test-only kill point (`persistence._killpoints`) at a
  random point of its next compaction commit (before BEGIN, after the fencing
  UPDATE, before COMMIT, after COMMIT before the reply): a kill *mid-commit*.
- **freeze**: SIGSTOP a worker holding a live lease until its lease TTL has passed,
  then SIGCONT. Its lease expires, another worker may take the session over, and
  its own late commit must be fenced off.

Killed workers are restarted (a new generation resumes their share of the turns).
Acknowledgements come from the workers' fsync'd ledgers, so a kill loses none.
When every worker has stopped, the leases killed workers left are given their TTL
to expire and are then released (garbage, reported); a lease still live then is a
leak. The integrity check itself is the normal one (`check`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Any

from persistence import Store, open_store
from persistence.internal import ENV_KILL_AT, POINTS

from ._chaos_worker import chaos_worker_main, ledger_acks
from ._config import STEP_TIMEOUT_S, WorkerConfig
from ._workload import WorkerResult, build_jobs

__all__ = ["CHAOS_LEASE_TTL_S", "MIN_FAULTS", "ChaosStats", "run_chaos"]

log = logging.getLogger("session_actors.simulate.chaos")

#: Lease TTL of chaos workers: short, so a freeze outlasts it in seconds.
CHAOS_LEASE_TTL_S = 2.0
#: One kill and one freeze at least.
MIN_FAULTS = 2
_PLAN_CYCLE = ("kill_mid_summary", "freeze", "kill_mid_commit", "kill_random")
_FREEZE_PAST_TTL_S = 1.0
#: How long a fault aimed at a lease holder looks for one before taking any worker.
_HOLDER_SEARCH_S = 5.0
#: Faults are at least this far apart, so a restarted worker gets going first.
_MIN_GAP_S = 1.0
#: How long the run keeps going for an armed worker to reach its kill point.
_ARMED_GRACE_S = 60.0
_MAX_STARTS_PER_WORKER = 500
_POLL_S = 0.05


@dataclass(slots=True)
class ChaosStats:
    kills: int = 0
    freezes: int = 0
    restarts: int = 0
    kills_by_moment: Counter = field(default_factory=Counter)  # mid_summary, mid_commit, random
    commit_points: Counter = field(default_factory=Counter)  # where the mid-commit kills hit
    expired_leases_released: int = 0
    live_leases_left: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kills": self.kills,
            "freezes": self.freezes,
            "restarts": self.restarts,
            "kills_by_moment": dict(sorted(self.kills_by_moment.items())),
            "commit_points": dict(sorted(self.commit_points.items())),
            "expired_leases_released": self.expired_leases_released,
        }


@dataclass(slots=True)
class _Worker:
    index: int
    generation: int
    proc: Any
    result_path: Path
    armed: str | None
    killed: bool = False  # by the supervisor (an armed worker kills itself)


def run_chaos(
    base: WorkerConfig, processes: int, faults: int, workdir: Path, advance: Callable[[int], None]
) -> tuple[WorkerResult, ChaosStats]:
    """Run the workload under faults; the merged result (acks from the ledgers)."""
    supervisor = _Supervisor(replace(base, lease_ttl_s=CHAOS_LEASE_TTL_S), processes, faults, workdir)
    try:
        supervisor.run(advance)
        supervisor.settle_leases()
    finally:
        supervisor.close()
    return supervisor.result(), supervisor.stats


class _Supervisor:
    def __init__(self, base: WorkerConfig, processes: int, faults: int, workdir: Path) -> None:
        self.base = base
        self.processes = processes
        self.workdir = workdir
        self.rng = random.Random(f"{base.seed}:chaos")
        self.plan = [_PLAN_CYCLE[i % len(_PLAN_CYCLE)] for i in range(max(faults, MIN_FAULTS))]
        self.rng.shuffle(self.plan)
        self.ctx = multiprocessing.get_context("spawn")
        # lock-free on purpose: a worker killed while holding a lock would keep it forever
        self.finished = self.ctx.Array("q", processes, lock=False)
        self.stop = self.ctx.Value("b", 0, lock=False)
        self.total_jobs = sum(len(build_jobs(replace(base, worker=i))) for i in range(processes))
        self.workers: dict[int, _Worker] = {}
        self.starts: Counter[int] = Counter()
        self.done: list[_Worker] = []  # exited cleanly after stop: their results count
        self.stats = ChaosStats()
        self.errors = WorkerResult()
        self.frozen: tuple[_Worker, float] | None = None
        self.arm_next = True  # the first restart is armed: at least one kill mid-commit
        self.store: Store = open_store(base.db)
        self._pause = threading.Event()  # never set: a timed wait

    # -- lifecycle ------------------------------------------------------------------

    def run(self, advance: Callable[[int], None]) -> None:
        for index in range(self.processes):
            self._start(index, arm=None)
        seen, next_fault, last_fault = 0, 0, time.monotonic()
        grace_until = None
        while True:
            self._wait_a_moment()
            self._reap_exits()
            self._thaw_if_due()
            progress = sum(self.finished)
            if progress > seen:
                advance(min(progress, self.total_jobs) - min(seen, self.total_jobs))
                seen = progress
            due = self.total_jobs * (next_fault + 1) / (len(self.plan) + 1)
            if (
                next_fault < len(self.plan)
                and progress >= due
                and self.frozen is None
                and time.monotonic() - last_fault >= _MIN_GAP_S
            ):
                self._inject(self.plan[next_fault])
                next_fault += 1
                last_fault = time.monotonic()
                continue
            if next_fault < len(self.plan) or progress < self.total_jobs or self.frozen is not None:
                continue
            armed = any(w.armed for w in self.workers.values())
            grace_until = grace_until or time.monotonic() + _ARMED_GRACE_S
            if not armed or time.monotonic() > grace_until:
                break
        self._stop_all()

    def _wait_a_moment(self) -> None:
        sentinels = [w.proc.sentinel for w in self.workers.values()]
        wait_for(sentinels, _POLL_S)

    def _start(self, index: int, *, arm: str | None) -> None:
        self.starts[index] += 1
        generation = self.starts[index] - 1
        name = f"worker-{index}-g{generation}"
        result_path = self.workdir / f"{name}.json"
        ledger_path = self.workdir / f"{name}.ledger"
        proc = self.ctx.Process(
            target=chaos_worker_main,
            name=f"sim-chaos-{name}",
            args=(replace(self.base, worker=index), str(ledger_path), str(result_path), self.finished, self.stop),
        )
        with _environ(ENV_KILL_AT, arm):  # a spawned child inherits the environment
            proc.start()
        self.workers[index] = _Worker(index, generation, proc, result_path, arm)

    def _reap_exits(self) -> None:
        for index, worker in list(self.workers.items()):
            if worker.proc.is_alive():
                continue
            worker.proc.join()
            del self.workers[index]
            code = worker.proc.exitcode
            if code == -signal.SIGKILL and not worker.killed and worker.armed:
                self.stats.kills += 1
                self.stats.kills_by_moment["mid_commit"] += 1
                self.stats.commit_points[worker.armed.rsplit(":", 1)[-1]] += 1
                log.info("worker %s died at its kill point %s", index, worker.armed)
            elif code == 0 and self.stop.value:
                self.done.append(worker)
                continue
            elif code != -signal.SIGKILL:
                self.errors.errors["WorkerProcessFailed"] += 1
                self.errors.error_examples.append(
                    f"worker process {index} generation {worker.generation} exited with {code}"
                )
            if not self.stop.value and self.starts[index] < _MAX_STARTS_PER_WORKER:
                self.stats.restarts += 1
                # an armed worker killed before its kill point hands the arming on
                self._start(index, arm=worker.armed if worker.killed and worker.armed else self._arming())

    def _arming(self) -> str | None:
        arm, self.arm_next = self.arm_next, not self.arm_next
        return f"commit_compaction:{self.rng.choice(POINTS)}" if arm else None

    def _stop_all(self) -> None:
        if self.frozen is not None:
            self._thaw()
        self.stop.value = 1
        deadline = time.monotonic() + STEP_TIMEOUT_S * 2
        while self.workers and time.monotonic() < deadline:
            self._wait_a_moment()
            self._reap_exits()
        for worker in self.workers.values():  # hung: counted as an error
            worker.proc.kill()
            worker.proc.join()
            self.errors.errors["WorkerProcessHung"] += 1
            self.errors.error_examples.append(f"worker process {worker.index} did not stop")
        self.workers.clear()

    # -- faults ---------------------------------------------------------------------

    def _inject(self, kind: str) -> None:
        if kind == "freeze":
            self._freeze(self._lease_holder() or self._any_worker())
            return
        if kind == "kill_mid_summary":
            holder = self._lease_holder()
            if holder is not None:
                self._kill(holder, "mid_summary")
                return
        if kind == "kill_mid_commit":
            self.arm_next = True  # its replacement dies at a commit point
        self._kill(self._any_worker(), "random")

    def _kill(self, worker: _Worker | None, moment: str) -> None:
        if worker is None:
            return
        worker.killed = True
        os.kill(worker.proc.pid, signal.SIGKILL)
        self.stats.kills += 1
        self.stats.kills_by_moment[moment] += 1
        log.info("killed worker %s (%s)", worker.index, moment)

    def _freeze(self, worker: _Worker | None) -> None:
        if worker is None:
            return
        os.kill(worker.proc.pid, signal.SIGSTOP)
        self.frozen = (worker, time.monotonic() + self.base.lease_ttl_s + _FREEZE_PAST_TTL_S)
        self.stats.freezes += 1
        log.info("froze worker %s past its lease TTL", worker.index)

    def _thaw_if_due(self) -> None:
        if self.frozen is not None and time.monotonic() >= self.frozen[1]:
            self._thaw()

    def _thaw(self) -> None:
        assert self.frozen is not None  # only called while one is frozen
        worker, _ = self.frozen
        self.frozen = None
        if worker.proc.is_alive():
            os.kill(worker.proc.pid, signal.SIGCONT)

    def _any_worker(self) -> _Worker | None:
        """A random live worker, one not armed if there is such (it is bound to die anyway)."""
        alive = [w for w in self.workers.values() if w.proc.is_alive() and not w.killed]
        candidates = [w for w in alive if not w.armed] or alive
        return self.rng.choice(candidates) if candidates else None

    def _lease_holder(self) -> _Worker | None:
        """A live worker holding a live lease of this run (mid-summary or mid-commit)."""
        deadline = time.monotonic() + _HOLDER_SEARCH_S
        while time.monotonic() < deadline:
            by_pid = {w.proc.pid: w for w in self.workers.values() if w.proc.is_alive() and not w.killed}
            now = self.store.now()
            for lease in self.store.leases():
                pid = _holder_pid(lease.holder)
                if lease.session_id.startswith(self.base.prefix) and lease.expires_at > now and pid in by_pid:
                    return by_pid[pid]
            self._pause.wait(0.01)
        return None

    # -- the end --------------------------------------------------------------------

    def settle_leases(self) -> None:
        """Give the leases killed workers left their TTL, then release them (garbage).
        Every registry is closed now: a lease still live after that is a leak."""
        deadline = time.monotonic() + self.base.lease_ttl_s + 5.0
        while self._leases(live=True) and time.monotonic() < deadline:
            self._pause.wait(0.1)
        self.stats.live_leases_left = len(self._leases(live=True))
        for lease in self._leases(live=False):
            self.stats.expired_leases_released += int(self.store.release_lease(lease))

    def _leases(self, *, live: bool) -> list:
        now = self.store.now()
        return [
            lease
            for lease in self.store.leases()
            if lease.session_id.startswith(self.base.prefix) and (lease.expires_at > now) == live
        ]

    def result(self) -> WorkerResult:
        total = WorkerResult()
        for worker in self.done:
            if worker.result_path.exists():
                total.merge(WorkerResult.from_json(worker.result_path.read_text(encoding="utf-8")))
        total.merge(self.errors)
        total.acks = list(ledger_acks(sorted(self.workdir.glob("*.ledger"))))
        total.appended = len(total.acks)
        total.turns = sum(self.finished)
        return total

    def close(self) -> None:
        if self.frozen is not None:
            self._thaw()
        for worker in self.workers.values():
            worker.proc.kill()
            worker.proc.join()
        self.store.close()


def _holder_pid(holder: str) -> int | None:
    """The pid in a simulate holder ``sim-w<i>:<host>:<pid>:<random>``."""
    parts = holder.split(":")
    try:
        return int(parts[-2])
    except (IndexError, ValueError):
        return None


@contextmanager
def _environ(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
