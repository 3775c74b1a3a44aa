"""Fault-injection trials: marked ``faults``; a bounded sample runs by default.

``SESSION_ACTORS_FAULT_TRIALS=N`` runs N trials per case instead of the default
sample. Every trial's count and failures are tallied per kind of fault and printed
at the end of the run (the figures of the README's Reliability section).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.harness import Tally

_TALLIES: dict[str, Tally] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/faults/" in item.nodeid:
            item.add_marker(pytest.mark.faults)


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Iterator[Tally]:
    """The tally of this test's kind (its function name), shared across parameters."""
    kind = request.node.originalname.removeprefix("test_")
    yield _TALLIES.setdefault(kind, Tally())


def pytest_terminal_summary(terminalreporter) -> None:
    if not _TALLIES:
        return
    terminalreporter.section("fault trials")
    for kind, t in sorted(_TALLIES.items()):
        terminalreporter.write_line(
            f"{kind}: {t.trials} trials, {t.faults} faults injected, {len(t.failures)} failures"
        )
