"""Every upstream incident (tests/scenarios/incidents.py), explored in every order.

After each schedule the harness checks that nothing forked, every acknowledged
message is there exactly once, turns stayed whole, tool results follow their calls,
seqs have no gap, no lease leaked and fsck is clean, plus each incident's own check.
"""

from __future__ import annotations

import pytest

from tests.scenarios.incidents import INCIDENTS

pytestmark = pytest.mark.timeout(600)

#: Every scenario must be explored to the end within this many schedules.
BOUND = 5_000


@pytest.mark.parametrize("name", list(INCIDENTS))
def test_every_order_of_the_incident_keeps_every_invariant(name: str) -> None:
    incident = INCIDENTS[name]()
    report = incident.explore_every_order(BOUND)
    assert report.complete, f"not every schedule was run within {BOUND}"
    assert report.schedules_run == len(report.schedules) > 1  # each run took an order of its own
    incident.after()
