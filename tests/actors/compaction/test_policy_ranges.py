"""Every CompactionPolicy number is checked against its documented range at construction:
a value that would overflow a timer later (``ask_timeout_s=1e300``) never gets that far."""

from __future__ import annotations

import pytest

from actors import CompactionPolicy
from actors.compaction._policy import DURATIONS
from protocol import InvalidArgumentError
from protocol._checks import MAX_COUNT, MAX_DURATION_S

BAD_DURATIONS = [0, -1, 1e300, 10**400, float("inf"), float("nan"), MAX_DURATION_S + 0.5, True, "30"]
COUNTS = {"max_tokens": 1, "target_tokens": 1, "keep_last": 0, "max_resident": 1}


def test_the_issue_case_is_refused_at_construction():
    with pytest.raises(InvalidArgumentError, match="ask_timeout_s"):
        CompactionPolicy(ask_timeout_s=1e300)


@pytest.mark.parametrize("name", [*DURATIONS, "cooldown_s"])
@pytest.mark.parametrize("bad", BAD_DURATIONS, ids=repr)
def test_durations_are_finite_positive_and_at_most_30_days(name, bad):
    if name == "cooldown_s" and bad == 0:
        assert CompactionPolicy(cooldown_s=0).cooldown_s == 0  # documented: no cooldown
        return
    with pytest.raises(InvalidArgumentError, match=name):
        CompactionPolicy(**{name: bad})


@pytest.mark.parametrize("name", [*DURATIONS, "cooldown_s"])
def test_30_days_is_the_longest_duration(name):
    assert getattr(CompactionPolicy(**{name: MAX_DURATION_S}), name) == MAX_DURATION_S


@pytest.mark.parametrize("name,minimum", COUNTS.items())
def test_counts_are_ints_in_range(name, minimum):
    assert getattr(CompactionPolicy(**{name: MAX_COUNT}), name) == MAX_COUNT
    assert getattr(CompactionPolicy(**{name: minimum}), name) == minimum
    for bad in (minimum - 1, MAX_COUNT + 1, 2**63, True, 1.0, "8"):
        with pytest.raises(InvalidArgumentError, match=name):
            CompactionPolicy(**{name: bad})
