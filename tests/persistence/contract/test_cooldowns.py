"""Contract: cooldowns merge by max and restore verbatim."""

from __future__ import annotations

import math

import pytest

from protocol import Cooldown, InvalidArgumentError
from tests.persistence.contract.db import snapshot


def test_arm_merges_by_max(store):
    store.create_session("s")
    assert store.cooldown("s") is None
    first = store.arm_cooldown("s", 100, "boom")
    assert first.session_id == "s" and first.error == "boom"
    assert first.until >= store.now() + 99
    shorter = store.arm_cooldown("s", 10, "minor")  # loses: keeps until and error
    assert shorter == first == store.cooldown("s")
    longer = store.arm_cooldown("s", 1000, "worse")
    assert longer.until > first.until and longer.error == "worse"
    assert store.cooldown("s") == longer
    assert store.get_session("s").cooldown_until == longer.until
    assert store.get_session("s").cooldown_error == "worse"


def test_clear_and_restore_verbatim(store):
    store.create_session("s")
    now = store.now()
    cases = [
        Cooldown("s", now + 500.123456, "live error"),
        Cooldown("s", now - 3600.5, "expired but exact"),
        Cooldown("s", now + 1, None),
    ]
    for snap in cases:
        store.arm_cooldown("s", 9999, "something else")
        store.restore_cooldown("s", snap)
        assert store.cooldown("s") == snap  # raw row, expired or not
    store.restore_cooldown("s", None)
    assert store.cooldown("s") is None
    store.arm_cooldown("s", 5, "x")
    store.clear_cooldown("s")
    assert store.cooldown("s") is None
    store.clear_cooldown("s")  # clearing nothing is fine
    assert store.get_session("s").cooldown_until is None


def test_arm_after_expired_row_takes_new_deadline(store):
    store.create_session("s")
    store.restore_cooldown("s", Cooldown("s", store.now() - 10, "old"))
    armed = store.arm_cooldown("s", 60, "new")
    assert armed.error == "new" and armed.until > store.now()


@pytest.mark.parametrize("seconds", [-1, math.nan, math.inf, "5", None])
def test_bad_cooldown_arguments_write_nothing(store, store_url, backend, seconds):
    store.create_session("s")
    store.create_session("t")
    before = snapshot(backend, store_url)
    with pytest.raises(InvalidArgumentError):
        store.arm_cooldown("s", seconds, "e")
    with pytest.raises(InvalidArgumentError):
        store.restore_cooldown("s", Cooldown("t", 1.0, "other session"))
    with pytest.raises(InvalidArgumentError):
        store.restore_cooldown("s", {"until": 1.0})  # type: ignore[arg-type]
    assert snapshot(backend, store_url) == before
