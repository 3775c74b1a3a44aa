"""Backend selection from URLs and paths, and URL display without secrets."""

from __future__ import annotations

import pytest

from persistence.urls import display_url, parse_store_url
from protocol import ConfigurationError


@pytest.mark.parametrize("text, expected", [
    ("state.db", ("sqlite", "state.db")),
    ("/var/lib/x/state.db", ("sqlite", "/var/lib/x/state.db")),
    ("sqlite:///rel.db", ("sqlite", "rel.db")),
    ("sqlite:////abs/state.db", ("sqlite", "/abs/state.db")),
    ("postgresql://u@h/db", ("postgresql", "postgresql://u@h/db")),
    ("postgres://u@h/db", ("postgresql", "postgres://u@h/db")),
])
def test_urls_pick_the_backend(text, expected):
    assert parse_store_url(text) == expected


@pytest.mark.parametrize("bad", ["", "  ", "mysql://h/db", ":memory:", "sqlite://", "sqlite:///:memory:"])
def test_bad_urls_are_configuration_errors(bad):
    with pytest.raises(ConfigurationError):
        parse_store_url(bad)


def test_display_url_masks_only_the_password():
    assert display_url("postgresql://u:s3cret@h:5433/db?x=1") == "postgresql://u:***@h:5433/db?x=1"
    assert display_url("postgresql://h/db") == "postgresql://h/db"
    assert display_url("state.db") == "state.db"
