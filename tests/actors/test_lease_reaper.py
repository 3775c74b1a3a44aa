"""The registry releases expired leases (crash garbage) once per ``lease_ttl_s``."""

from __future__ import annotations

import threading
import time

import pytest

from persistence import open_store
from protocol import StoreBusyError

pytestmark = pytest.mark.timeout(60)

TTL_S = 0.4


def test_registry_reaps_expired_leases_once_per_ttl(make_registry, store_url) -> None:
    other = open_store(store_url)  # a crashed process's leftovers, and a live holder
    try:
        for sid in ("crashed", "busy"):
            other.create_session(sid)
        garbage = other.acquire_lease("crashed", "dead-process", 0.05)
        live = other.acquire_lease("busy", "live-process", 300)
        registry = make_registry(faulty=True, lease_ttl_s=TTL_S)
        calls: list[tuple[float, object]] = []
        second = threading.Event()

        def reap(real):
            if not calls:  # the first sweep meets a busy store: the janitor carries on
                calls.append((time.monotonic(), "busy"))
                raise StoreBusyError("injected")
            calls.append((time.monotonic(), real()))
            second.set()
            return calls[-1][1]

        registry.store.hooks["reap_leases"] = reap
        started = time.monotonic()
        assert second.wait(20), "the registry never swept twice"
        assert calls[1][1] == 1  # the expired lease, and only that one
        assert calls[0][0] - started >= TTL_S * 0.9  # not before one TTL
        assert calls[1][0] - calls[0][0] >= TTL_S * 0.9  # once per TTL, not in a loop
        assert other.leases() == [live]
        assert other.acquire_lease("crashed", "new-process", 30).token == garbage.token + 1
    finally:
        other.close()
