"""The contract suite runs against every backend, PostgreSQL behind PgBouncer included."""

from __future__ import annotations

import pytest

#: ``pgbouncer``: PostgreSQL through a real PgBouncer in transaction mode (skipped when
#: there is none, a failure with SESSION_ACTORS_REQUIRE_PG=1).
CONTRACT_BACKENDS = ["sqlite", "postgres", "pgbouncer"]


@pytest.fixture(params=CONTRACT_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param
