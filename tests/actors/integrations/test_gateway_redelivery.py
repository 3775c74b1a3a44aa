"""The gateway pattern end to end (exactly-once turns): worker processes answer a
chat platform's events with the OpenAI Agents SDK against a real chat-completions
server, on one SQLite file or PostgreSQL schema, while the platform redelivers some
events to another worker and workers rotate the sessions meanwhile. Every event is
answered by the model once, stored once, kept, and its turn stays whole; see
`tests.actors.integrations.gateway_workload` for the workload and what each figure
counts. ``SESSION_ACTORS_GATEWAY_TURNS`` (default 60) and
``SESSION_ACTORS_GATEWAY_WORKERS`` (default and least 3) scale it,
``SESSION_ACTORS_GATEWAY_SEED`` picks another routing; ``pytest -s`` prints the
figures. The control runs the same gateway with an unkeyed turn: it must see every
redelivered event answered twice, or the counting could not fail.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from tests.actors.integrations.gateway_workload import Workload, run_workload

TURNS = int(os.environ.get("SESSION_ACTORS_GATEWAY_TURNS", "60"))
WORKERS = max(3, int(os.environ.get("SESSION_ACTORS_GATEWAY_WORKERS", "3")))
SEED = int(os.environ.get("SESSION_ACTORS_GATEWAY_SEED", "7"))
#: The run's own deadline: past it the platform gives up and reports what is outstanding.
DEADLINE_S = 90.0 + 1.5 * TURNS

pytestmark = pytest.mark.timeout(int(DEADLINE_S) + 60)


def test_redelivered_events_are_answered_once_across_workers_and_rotations(store_url, backend):
    workload = Workload(turns=TURNS, workers=WORKERS, seed=SEED, deadline_s=DEADLINE_S)
    figures = run_workload(workload, backend, store_url)
    print(figures.line())
    # the scenario happened: several workers, redeliveries both while the first was in
    # flight and after it was answered, tool turns, and rotations committed
    assert figures.workers >= 3
    assert figures.redeliveries > 0 and 0 < figures.concurrent_redeliveries < figures.redeliveries, figures.line()
    assert figures.tool_turns > 0 and figures.rotations > 0, figures.line()
    # every redelivery was answered from the store: the model ran once per event
    assert figures.replays == figures.redeliveries, figures.line()
    assert figures.violations() == dict.fromkeys(figures.violations(), 0), figures.examples


def test_control_without_the_key_every_redelivered_event_is_answered_twice(store_url, backend):
    workload = Workload(turns=16, workers=3, redeliver=0.5, compact=0.0, keyed=False, deadline_s=DEADLINE_S)
    figures = run_workload(workload, backend, store_url)
    print(figures.line())
    assert figures.redeliveries > 0
    assert figures.replays == 0
    assert figures.double_answers == figures.redeliveries, figures.examples
    assert figures.duplicate_asks_stored == figures.redeliveries, figures.examples
    assert figures.errors == 0 and figures.lost == 0 and figures.unanswered == 0, figures.examples
