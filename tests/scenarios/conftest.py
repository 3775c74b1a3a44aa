"""The harness's own tests keep saved failures (``.session-actors-harness``) in the
test's ``tmp_path``, never in the checkout."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _failures_in_tmp_path(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
