"""Fixtures: a real ``session-actors serve`` subprocess with a token per role."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

if os.environ.get("SESSION_ACTORS_REQUIRE_PG") != "1":  # CI installs every extra: there it must import
    pytest.importorskip("fastapi", reason="the serve extra is not installed")

from .client import Server, start_server, token_file

#: name -> (scopes, source) of the tokens every served test gets.
TOKENS = {
    "admin": ("admin", None),
    "bot": ("read,write", None),
    "reader": ("read", None),
    "discord": ("read,write", "discord"),
    "writer": ("write", None),
    "web": ("read,write", "web"),
}


@pytest.fixture
def server(tmp_path) -> Iterator[Server]:
    path = tmp_path / "tokens.txt"
    secrets = token_file(path, TOKENS)
    running = start_server(str(tmp_path / "state.db"), path, "--drain", "5", tokens_by_name=secrets)
    try:
        yield running
    finally:
        code = running.stop()
        assert code == 0, "".join(running.stderr)
