"""`actors.testing.strategies`: generated scenarios run clean, and a failing one shrinks."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors import CompactionPolicy, HeadTailCompressor
from actors.testing import Harness, strategies
from protocol import Message

pytestmark = pytest.mark.timeout(300)

POLICY = CompactionPolicy(max_tokens=None, keep_last=2)
PREFILL = [Message("user", "earlier ask"), Message("assistant", "earlier answer")]


def _harness() -> Harness:
    return Harness(compressor=HeadTailCompressor(keep_last=2), policy=POLICY, prefill=PREFILL)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(strategies.scenarios())
def test_generated_scenarios_keep_every_invariant(scenario) -> None:
    with _harness() as harness:
        harness.explore(scenario.paths, review=scenario.review, schedules=4, seed=1).assert_ok()


def test_a_failing_scenario_shrinks_to_the_step_that_fails() -> None:
    """A user check that forbids summaries fails exactly when a path compacts: the
    shrunk scenario holds one compress and the few writes that give it something
    to compact, nothing else."""
    found: list[strategies.Scenario] = []

    def no_summary(transcript):
        assert not any(m.meta.get("synthetic") or "COMPACTION" in m.text for m in transcript)

    @settings(
        max_examples=60, deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(strategies.scenarios(review=False))
    def run(scenario) -> None:
        with _harness() as harness:
            report = harness.explore(scenario.paths, schedules=1, check=no_summary)
        if report.failures:
            found.append(scenario)
        report.assert_ok()

    with pytest.raises(AssertionError):
        run()
    shrunk = found[-1]
    kinds = [step.kind for path in shrunk.paths.values() for step in path.steps]
    assert kinds.count("compress") == 1 and not {"interrupt", "retract"} & set(kinds) and len(kinds) <= 3, shrunk


def test_scenarios_print_as_the_steps_they_run() -> None:
    scenario = strategies.Scenario(
        {"p0": strategies._Path("p0", (strategies.Step("turn", 2), strategies.Step("compress", mode="in_place")))}
    )
    assert repr(scenario) == "Scenario(p0: [turn(2), compress(in_place, force)]; review=[])"
    assert st is not None
