"""Contract: ``append_nowait`` (both stores offer it, outside the `Store` protocol):
a submission that fails is completed with its own error, and the rest of its batch
commits."""

from __future__ import annotations

import pytest

from protocol import Message, SessionNotFoundError
from tests.persistence.sqlite.test_append_nowait import Completions

pytestmark = pytest.mark.timeout(60)


def test_a_failing_submission_is_completed_with_its_error_alone(store):
    store.create_session("here")
    done = Completions(expected=2)
    assert store.append_nowait("missing", [Message("user", "lost")], done.on_done)
    assert store.append_nowait("here", [Message("user", "kept")], done.on_done)
    assert done.all_in.wait(10)
    (built_missing, error, _), (built_here, no_error, _) = done.outcomes
    assert built_missing is None and isinstance(error, SessionNotFoundError)
    assert no_error is None and built_here()[0].content == "kept"
    assert [m.content for m in store.transcript("here")] == ["kept"]
