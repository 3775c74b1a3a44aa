"""Every scenario of tests/scenarios/guarantees.py, explored in every order: each
aims at one guarantee the upstream incidents reach only behind a second check."""

from __future__ import annotations

import pytest

from tests.scenarios.guarantees import GUARANTEES
from tests.scenarios.test_upstream_incidents import BOUND

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("name", list(GUARANTEES))
def test_every_order_keeps_the_guarantee(name: str) -> None:
    incident = GUARANTEES[name]()
    report = incident.explore_every_order(BOUND, failures_dir=None)
    assert report.complete, f"not every schedule was run within {BOUND}"
    assert report.schedules_run == len(report.schedules) > 1  # each run took an order of its own
    incident.after()
