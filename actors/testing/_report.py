"""`Report`: what an exploration ran and found; `Run`: what one schedule did."""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol import StoredMessage

from ._invariants import Failure

__all__ = ["Report", "Run"]


@dataclass(slots=True)
class Run:
    """What one schedule did: its decisions, the invariants it broke, its coverage."""

    decisions: str
    broken: list[tuple[str, str]]
    transcript: list[StoredMessage]
    steps: int
    points: dict[str, int] = field(default_factory=dict)
    orders: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass(slots=True)
class Report:
    """What `Harness.explore` ran and found."""

    schedules_run: int = 0
    failures: list[Failure] = field(default_factory=list)
    complete: bool = False  # exhaustive: every schedule (within the preemption bound) was visited
    steps: int = 0  # scheduling steps over all schedules
    seconds: float = 0.0
    schedules: set[str] = field(default_factory=set)  # the distinct schedule strings
    #: "points": label -> times a thread ran from it; "orders": "a < b" -> times a ran
    #: while b waited at a decision
    coverage: dict[str, dict[str, int]] = field(default_factory=lambda: {"points": {}, "orders": {}})

    def both_orders(self) -> list[tuple[str, str]]:
        """The pairs of steps seen in both orders (each pair once, sorted)."""
        orders = self.coverage["orders"]
        pairs = {tuple(sorted(key.split(" < ", 1))) for key in orders}
        return sorted((a, b) for a, b in pairs if f"{a} < {b}" in orders and f"{b} < {a}" in orders)

    def assert_ok(self) -> None:
        """AssertionError naming the first failure (its invariant and schedule)."""
        if self.failures:
            first = self.failures[0]
            raise AssertionError(
                f"{len(self.failures)} failure(s) in {self.schedules_run} schedule(s); first: "
                f"{first.invariant}: {first.detail}\n  replay with schedule={first.schedule!r}"
            )

    def _count(self, run: Run) -> None:
        """Add one schedule's run (its steps, its string, its coverage)."""
        self.schedules_run += 1
        self.steps += run.steps
        self.schedules.add(run.decisions)
        points, orders = self.coverage["points"], self.coverage["orders"]
        for label, n in run.points.items():
            points[label] = points.get(label, 0) + n
        for (first, then), n in run.orders.items():
            key = f"{first} < {then}"
            orders[key] = orders.get(key, 0) + n
