"""`Harness`: runs paths against the real registry, actors and a real database (a
SQLite file, or a PostgreSQL schema), one schedule at a time, and checks the
invariants after each.

Each schedule starts from a fresh database holding the session and its ``prefill``
(`_databases`), installs a `DeterministicScheduler`, opens a `SessionRegistry` per
harness process on it, starts one thread per path and lets the scheduler run them
to the end. Then it releases the threads, closes the registries (so a lease still
held is a leak) and checks the invariants. Every decision the scheduler made is in the schedule string,
so `replay` runs the same schedule again, step for step.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from os import PathLike
from pathlib import Path

from persistence import Store
from protocol import InvalidArgumentError, Message, StoredMessage, TranscriptError

from .. import SessionRegistry
from ..compaction import CompactionPolicy
from ..compressors import Compressor
from ..scheduling import hooks as _sched
from ._choosers import Exhaustive, Priorities, Replay, ReplayThenSteady, ScheduleMismatchError, join, split
from ._databases import databases_for, prefill_with
from ._failures import DEFAULT_FAILURES_DIR, SavedFailures, exploration_key, shrink
from ._invariants import Failure, check_schedule
from ._paths import Crashed, Faults, Ledger, PathHandle
from ._report import Report, Run
from ._scheduler import Chooser, DeadlockError, DeterministicScheduler, HarnessStuckError
from ._setup import Check, PathFn, Setup

__all__ = ["Harness", "Report"]


#: Every registry the harness opens holds leases as this holder.
HOLDER = "harness"
#: How many decisions PCT first expects a schedule to take (then the longest seen).
_FIRST_HORIZON = 12
#: Real seconds a path thread gets to finish once its schedule is over.
_JOIN_S = 10.0


class Harness:
    """Explores the schedules of paths on one session; see ``docs/testing.md``.

    ``store``: None for a temporary directory (removed with the harness), a
    directory to keep each schedule's SQLite file in, or a PostgreSQL URL (a schema
    per schedule). ``prefill``: messages the session holds before every schedule.
    """

    def __init__(
        self,
        compressor: Compressor | None = None,
        policy: CompactionPolicy | None = None,
        store: str | Path | None = None,
        prefill: Sequence[Message] = (),
    ) -> None:
        if any(not isinstance(m, Message) for m in prefill):
            raise InvalidArgumentError("prefill must be a sequence of Message")
        self.compressor = compressor
        self.policy = policy or CompactionPolicy()
        self.prefill = list(prefill)
        self._databases, temporary = databases_for(store)
        # a temporary directory goes with the harness (or at exit); yours stays
        self._cleanup: Callable[[], object] | None = None
        if temporary is not None:
            self._cleanup = weakref.finalize(self, shutil.rmtree, temporary, ignore_errors=True)
        self._local = threading.local()  # the path running on this thread
        self._dead_holders: Callable[[], set[str]] = set  # the holders of the processes crashed in this run

    def close(self) -> None:
        """Remove the temporary directory (a no-op for a directory you gave)."""
        if self._cleanup is not None:
            self._cleanup()

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the API ------------------------------------------------------------------------

    def explore(
        self,
        paths: Mapping[str, PathFn],
        *,
        review: Collection[str] = (),
        session_id: str = "S",
        schedules: int = 200,
        seed: int = 0,
        exhaustive: bool = False,
        max_schedules: int = 10_000,
        check: Check | None = None,
        stop_at_first: bool = False,
        processes: Mapping[str, str] | None = None,
        pauses: Mapping[str, float] | None = None,
        preemption_bound: int | None = None,
        pct_depth: int = 3,
        restarts: bool = True,
        reduce: bool = True,
        failures_dir: str | PathLike[str] | None = DEFAULT_FAILURES_DIR,
    ) -> Report:
        """Run ``schedules`` seeded random schedules (PCT of depth ``pct_depth``), or
        (``exhaustive``) every schedule up to ``max_schedules``, checking the invariants
        after each.

        ``preemption_bound``: exhaustive search visits only the schedules that switch
        away from a thread that could go on at most that many times; `Report.complete`
        then says that bounded space was covered. ``restarts``: an exhaustive search
        that has not finished by half its budget spends the other half on random
        schedules instead of one corner of the space. ``reduce``: exhaustive search skips
        the orders that only swap steps that commute (two reads of the session, steps
        on other sessions), assuming paths share nothing but their sessions: turn it
        off when they share other state that ``check`` reads. ``failures_dir``: where failing
        schedules are saved and replayed from first next time (None: not saved).
        ``processes`` puts paths in processes of their own (path -> process name; the
        others share ``"main"``): each process has its own registry, holder and store
        connection on the one database. ``pauses`` (process -> seconds) lets the
        scheduler freeze a process once per schedule, at any decision, for that many
        virtual seconds: SIGSTOP, as a schedule."""
        setup = Setup.of(paths, review, session_id, check, processes, pauses)
        budget = max_schedules if exhaustive else schedules
        for name, value, low in (("number of schedules", budget, 1), ("pct_depth", pct_depth, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidArgumentError(f"the {name} must be an int >= {low}, got {value!r}")
        if preemption_bound is not None and (
            isinstance(preemption_bound, bool) or not isinstance(preemption_bound, int) or preemption_bound < 0
        ):
            raise InvalidArgumentError(f"preemption_bound must be None or an int >= 0, got {preemption_bound!r}")
        saved = SavedFailures(failures_dir, exploration_key(session_id, paths, review, setup.process_of, setup.pauses))
        report = Report()
        started = time.perf_counter()
        failing = self._replay_saved(setup, saved, report)
        shrunk = {f.invariant for f in report.failures}
        if not (failing and stop_at_first):
            systematic = budget // 2 if exhaustive and restarts else budget
            prefix: list[int] | None = [] if exhaustive else None
            random_from = report.schedules_run
            horizon = _FIRST_HORIZON
            while report.schedules_run < budget and not (stop_at_first and report.failures):
                exploring = prefix is not None and report.schedules_run < systematic
                if exhaustive and not exploring and prefix is None:
                    break  # the bounded space was covered
                chooser: Chooser = (
                    Exhaustive(prefix, preemption_bound, reduce=reduce)
                    if exploring and prefix is not None
                    else Priorities(
                        seed * 1_000_003 + report.schedules_run - random_from, depth=pct_depth, horizon=horizon
                    )
                )
                run = self._run(setup, chooser)
                horizon = max(horizon, len(split(run.decisions)))  # PCT's changes fall among real decisions
                report._count(run)
                for name, detail in run.broken:
                    random_seed = None if exploring else seed
                    if name in shrunk:  # one shrunk (and saved) failure per invariant is enough
                        report.failures.append(Failure(run.decisions, name, detail, run.decisions, random_seed))
                        continue
                    shrunk.add(name)
                    report.failures.append(self._shrunk(setup, run, name, detail, random_seed))
                    failing.append(report.failures[-1].schedule)
                if isinstance(chooser, Exhaustive):
                    prefix = chooser.next_prefix()
            report.complete = exhaustive and prefix is None
        saved.save(failing)
        report.seconds = time.perf_counter() - started
        return report

    def _replay_saved(self, setup: Setup, saved: SavedFailures, report: Report) -> list[str]:
        """Run the saved failures first; those that still fail (and are kept)."""
        failing = []
        for schedule in saved.load():
            chooser = Replay(schedule)
            try:
                run = self._run(setup, chooser)
            except ScheduleMismatchError:  # the paths changed: that order no longer exists
                continue
            if not chooser.finished():
                continue
            report._count(run)
            report.failures += [Failure(schedule, n, d, original=schedule) for n, d in run.broken]
            if run.broken:
                failing.append(schedule)
        return failing

    def _shrunk(self, setup: Setup, run: Run, invariant: str, detail: str, seed: int | None) -> Failure:
        """The failure, its schedule shrunk (`_failures.shrink`)."""

        def still_fails(prefix: list[str]) -> list[str] | None:
            again = self._run(setup, ReplayThenSteady(prefix))
            return split(again.decisions) if any(n == invariant for n, _ in again.broken) else None

        shrunk = join(shrink(split(run.decisions), still_fails))
        return Failure(shrunk, invariant, detail, original=run.decisions, seed=seed)

    def replay(
        self,
        paths: Mapping[str, PathFn],
        schedule: str,
        *,
        review: Collection[str] = (),
        session_id: str = "S",
        check: Check | None = None,
        processes: Mapping[str, str] | None = None,
        pauses: Mapping[str, float] | None = None,
    ) -> list[StoredMessage]:
        """Run ``schedule`` again: AssertionError naming the invariant if it breaks one,
        else the session's final live transcript."""
        setup = Setup.of(paths, review, session_id, check, processes, pauses)
        chooser = Replay(schedule)
        run = self._run(setup, chooser)
        if not chooser.finished():
            raise ScheduleMismatchError(f"the run ended before the schedule did: {schedule!r}")
        if run.broken:
            name, detail = run.broken[0]
            raise AssertionError(f"{name}: {detail}\n  schedule={schedule!r}")
        return run.transcript

    def advance(self, seconds: float) -> None:
        """From a path: sleep ``seconds`` on the virtual clock (`PathHandle.advance`)."""
        path: PathHandle | None = getattr(self._local, "path", None)
        if path is None:
            raise InvalidArgumentError("harness.advance() is called from a path, while it runs")
        path.advance(seconds)

    # -- one schedule ------------------------------------------------------------------

    def _run(self, setup: Setup, chooser: Chooser) -> Run:
        databases = self._databases
        db = databases.fresh(setup.session_id, prefill_with(self.prefill, setup.session_id, self._registry))
        scheduler = DeterministicScheduler(chooser, pauses=setup.pauses)
        groups = sorted(set(setup.process_of.values()))
        stores = {g: databases.open(db, scheduler.wall_offset) for g in groups}
        ledger = Ledger()
        errors: dict[str, str] = {}
        broken: list[tuple[str, str]] = []
        _sched.install(scheduler)
        try:
            broken += self._schedule(setup, scheduler, stores, ledger, errors)
        except BaseException:
            self._close(stores, db)
            raise
        finally:
            _sched.uninstall(scheduler)
        try:
            broken = [("path_error", f"{n}: {e}") for n, e in sorted(errors.items())] + broken
            dead = self._dead_holders()
            store = next((stores[g] for g in groups if _holder(g) not in dead), None)
            if store is None:  # every process crashed: the checks read through a store of their own
                store = stores["checks"] = databases.open(db, scheduler.wall_offset)
            turns, archived_at = databases.turn_tokens(db), databases.archived_at(db)
            broken += check_schedule(store, setup.session_id, ledger, turns, archived_at, setup.check, dead)
            transcript = _live_transcript(store, setup.session_id)
        finally:
            self._close(stores, db)
        return Run(join(scheduler.decisions), broken, transcript, scheduler.steps, scheduler.points, scheduler.orders)

    def _schedule(
        self,
        setup: Setup,
        scheduler: DeterministicScheduler,
        stores: dict[str, Store],
        ledger: Ledger,
        errors: dict[str, str],
    ) -> list[tuple[str, str]]:
        """Start a registry per process and a thread per path; run them to the end."""
        registries: dict[str, SessionRegistry] = {}
        threads: list[_sched.Thread] = []
        faults = {group: self._faults(scheduler, stores, group) for group in stores}
        info = next(iter(stores.values())).get_session(setup.session_id)
        conversation = None if info is None else info.incarnation  # what every path's steps touch
        self._dead_holders = lambda: {_holder(g) for g, f in faults.items() if f.dead}
        try:
            for group, store in stores.items():
                scheduler.spawn_group = group
                registries[group] = self._registry(store, _holder(group))
            for name, fn in sorted(setup.paths.items()):
                scheduler.spawn_group = group = setup.process_of[name]
                registry = registries[group]
                handle = (
                    registry.review(setup.session_id) if name in setup.review else registry.session(setup.session_id)
                )
                path = PathHandle(name, handle, ledger, faults[group], conversation)
                threads.append(self._start_path(path, fn, errors))
            try:
                # a path of a crashed process is over, wherever it stopped
                groups = [faults[setup.process_of[name]] for name in sorted(setup.paths)]
                scheduler.run(alive=lambda: not all(t.finished.is_set() or f.dead for t, f in zip(threads, groups)))
            except (DeadlockError, HarnessStuckError) as exc:
                return [("deadlock", str(exc))]
            return []
        finally:
            scheduler.release()
            for group, registry in registries.items():
                if faults[group].dead:  # its threads find its store closed: nothing more is written
                    with contextlib.suppress(Exception):
                        registry.close(drain_s=0)
                else:
                    registry.close(drain_s=0)  # the schedule is over: what it left open (a deadlock) is abandoned
            for thread in threads:
                thread.join(_JOIN_S)

    @staticmethod
    def _faults(scheduler: DeterministicScheduler, stores: Mapping[str, Store], group: str) -> Faults:
        """A process's faults: a freeze stops its threads; a crash stops them for good and
        closes its store connection, so that nothing it had not written gets written."""
        faults = Faults(freeze=scheduler.freeze)

        def crash() -> None:
            faults.dead = True
            scheduler.crash()
            stores[group].close()

        faults.crash = crash
        return faults

    def _start_path(self, path: PathHandle, fn: PathFn, errors: dict[str, str]) -> _sched.Thread:
        def run() -> None:
            self._local.path = path
            try:
                _sched.point(f"{path.name} start", path.footprint())
                fn(path)
            except Crashed:  # its process died: the path ends there, as it was asked to
                pass
            except BaseException as exc:  # the path did not expect it: a failure of the run
                errors[path.name] = "".join(traceback.format_exception_only(exc)).strip()
            finally:
                self._local.path = None

        thread = _sched.Thread(target=run, name=f"harness-path:{path.name}", daemon=True)
        thread.start()
        return thread

    # -- databases -------------------------------------------------------------------

    def _registry(self, store: Store, holder: str = HOLDER) -> SessionRegistry:
        return SessionRegistry(store, compressor=self.compressor, policy=self.policy, holder=holder)

    def _close(self, stores: Mapping[str, Store], db: str) -> None:
        for store in stores.values():
            store.close()  # a crashed process's store was closed already: again is a no-op
        self._databases.remove(db)


def _holder(group: str) -> str:
    """The holder a harness process's registry holds leases as."""
    return HOLDER if group == "main" else f"{HOLDER}:{group}"


def _live_transcript(store: Store, session_id: str) -> list[StoredMessage]:
    """The transcript a gateway reads next; none when the lineage has no one tip (a fork)."""
    try:
        return store.transcript(store.resolve(session_id))
    except TranscriptError:
        return []
