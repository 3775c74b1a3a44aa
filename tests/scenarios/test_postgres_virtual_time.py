"""Incidents that move the harness's clock, explored on PostgreSQL.

The store takes the harness's virtual clock there too, so a turn lease lapses while
its holder is frozen and a dead turn waits out its lease in virtual time, through
PostgreSQL's own statements: the group-commit batch statement's turn check (and its
reading of why it refused), a rotation's child row carrying a dead turn lease, the
dead turn found and sealed behind a withdrawn holder.
"""

from __future__ import annotations

import dataclasses

import pytest

from actors.testing import Harness
from tests.pg import PG_URL
from tests.scenarios.incidents import INCIDENTS, Incident

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(600)]

BOUND = 500


def on_postgres(incident: Incident) -> Incident:
    """``incident`` with its harness's options, a schema per schedule on the test server."""
    harness = incident.harness
    harness.close()
    moved = Harness(harness.compressor, harness.policy, store=PG_URL, prefill=harness.prefill)
    return dataclasses.replace(incident, harness=moved)


@pytest.mark.parametrize(
    "name",
    [
        "a holder frozen inside its turn",  # the batch statement refuses the late answer
        "a turn lapsing during a slow rotation",  # the continuation carries the dead turn
        "a dead turn sealed",  # the other process's append waits out the lease, 10 s
    ],
)
def test_a_lease_lapses_on_the_harness_clock_on_postgresql(name: str, pg_url: str) -> None:
    """Each fails on a store reading the server's clock: the late answer lands (its
    turn is still live after 25 virtual seconds), or the append behind a dead turn
    times out (its lease never lapses in virtual time)."""
    incident = on_postgres(INCIDENTS[name]())
    report = incident.explore_every_order(BOUND)
    assert report.complete, f"not every schedule was run within {BOUND}"
    incident.after()
