"""OpenTelemetry from the stores: appends and busy retries, counted by both backends; and
nothing at all imported when the ``otel`` extra is missing."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import uuid
from contextlib import closing

import pytest

from persistence import open_store
from protocol import Message, SessionEndedError
from tests.actors.helpers import wait_until
from tests.otel import Otel, otel
from tests.pg import pg_rows, with_application_name

pytestmark = pytest.mark.timeout(60)

BUSY = "session_actors.store.busy_retries"


def test_appends_are_counted_in_messages_and_timed_per_call(otel: Otel, store) -> None:
    store.create_session("m")
    messages, calls = otel.counter("session_actors.appends"), otel.histogram_count("session_actors.append.duration")
    store.append("m", [Message("user", "a"), Message("assistant", "b"), Message("user", "c")])
    store.append("m", Message("assistant", "d"))
    assert otel.counter("session_actors.appends") == messages + 4
    assert otel.histogram_count("session_actors.append.duration") == calls + 2


def test_a_refused_append_counts_nothing(otel: Otel, store) -> None:
    store.create_session("ended")
    store.end_session("ended", "user")
    messages = otel.counter("session_actors.appends")
    with pytest.raises(Exception):
        store.append("ended", Message("user", "late"))
    assert otel.counter("session_actors.appends") == messages


def test_each_append_and_read_is_a_span_named_under_one_namespace(otel: Otel, store) -> None:
    store.create_session("spans")
    store.append("spans", [Message("user", "a"), Message("assistant", "b")])
    assert [m.text for m in store.transcript("spans")] == ["a", "b"]
    assert store.archive("spans") == []
    (append,) = otel.spans("session_actors.append", "spans")
    assert dict(append.attributes) == {"session_actors.session_id": "spans", "session_actors.messages": 2}
    reads = {s.attributes["session_actors.operation"]: s for s in otel.spans("session_actors.read", "spans")}
    assert reads["transcript"].attributes["session_actors.messages"] == 2
    assert reads["archive"].attributes["session_actors.messages"] == 0
    assert all(key.startswith("session_actors.") for s in [append, *reads.values()] for key in s.attributes)


def test_a_refused_append_is_a_span_with_its_error(otel: Otel, store) -> None:
    from opentelemetry.trace import StatusCode

    store.create_session("refused-span")
    store.end_session("refused-span", "user")
    with pytest.raises(SessionEndedError):
        store.append("refused-span", Message("user", "late"))
    (span,) = otel.spans("session_actors.append", "refused-span")
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


def test_sqlite_busy_retries_are_counted(otel: Otel, sqlite_path: str) -> None:
    store = open_store(sqlite_path)
    try:
        store.create_session("s")
        retries = otel.counter(BUSY)
        result: dict[str, object] = {}
        with closing(sqlite3.connect(sqlite_path, isolation_level=None)) as blocker:
            blocker.execute("BEGIN IMMEDIATE")  # another process holding the write lock
            writer = threading.Thread(
                target=lambda: result.setdefault("stored", store.append("s", Message("user", "x")))
            )
            writer.start()
            wait_until(lambda: otel.counter(BUSY) > retries, what="a busy retry")
            blocker.execute("ROLLBACK")
            writer.join(30)
        assert [m.content for m in result["stored"]] == ["x"]  # retried until it went through
    finally:
        store.close()


KILL = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s"
WAITING = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'"


@pytest.mark.postgres
def test_postgres_read_retried_after_a_lost_connection_is_counted(otel: Otel, pg_url: str) -> None:
    app = f"otel-{uuid.uuid4().hex[:8]}"
    store = open_store(with_application_name(pg_url, app), min_size=1, max_size=1)
    try:
        store.create_session("s")
        retries = otel.counter(BUSY)
        assert pg_rows(pg_url, KILL, (app,))[0][0] >= 1
        # the pooled connection is dead: the read is retried on a new one
        assert store.get_session("s").id == "s"
        assert otel.counter(BUSY) > retries
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_append_retried_after_its_backend_was_terminated_is_counted(otel: Otel, pg_url: str) -> None:
    from tests.persistence.postgres.test_group_commit import gate

    app = f"otel-{uuid.uuid4().hex[:8]}"
    store = open_store(with_application_name(pg_url, app))
    try:
        store.create_session("s")
        store.append("s", Message("user", "before"))
        retries = otel.counter(BUSY)
        result: dict[str, object] = {}
        with gate(pg_url):  # holds the append's statement
            writer = threading.Thread(
                target=lambda: result.setdefault("stored", store.append("s", Message("user", "x")))
            )
            writer.start()
            wait_until(lambda: pg_rows(pg_url, WAITING, (app,))[0][0] == 1, what="the blocked append")
            assert pg_rows(pg_url, KILL, (app,))[0][0] >= 1  # killed mid-statement: rolled back
        writer.join(30)
        assert [m.seq for m in result["stored"]] == [2]  # sent again on a new connection
        assert otel.counter(BUSY) > retries
    finally:
        store.close()


NO_EXTRA = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from actors import HeadTailCompressor, SessionRegistry, CompactionPolicy
from persistence import open_store, _telemetry as telemetry
store = open_store(sys.argv[1])
with SessionRegistry(store, compressor=HeadTailCompressor(keep_last=2),
                     policy=CompactionPolicy(max_tokens=50)) as registry:
    handle = registry.session("s")
    for n in range(12):
        handle.append("user" if n % 2 == 0 else "assistant", f"message {n}")
    outcome = handle.compress(force=True)
    stats = registry.stats()
store.close()
loaded = sorted(name for name, module in sys.modules.items()
                if name.startswith("opentelemetry") and module is not None)
print(telemetry.enabled(), outcome.status.value in ("compacted", "unchanged"), stats["resident"], loaded)
"""


def test_without_the_extra_nothing_is_imported_and_everything_works(tmp_path) -> None:
    db = str(tmp_path / "state.db")
    result = subprocess.run([sys.executable, "-c", NO_EXTRA, db], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "1", "[]"]


API_ONLY = """
import sys
from persistence import open_store, _telemetry as telemetry
from protocol import Message
store = open_store(sys.argv[1])
store.create_session("s")
store.append("s", Message("user", "hi"))
store.close()
from opentelemetry import trace
print(telemetry.enabled(), type(trace.get_tracer_provider()).__name__)
"""


def test_with_the_api_but_no_sdk_it_is_a_silent_no_op(tmp_path) -> None:
    db = str(tmp_path / "state.db")
    result = subprocess.run([sys.executable, "-c", API_ONLY, db], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "ProxyTracerProvider"] and result.stderr == ""


PROVIDER_LATER = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from persistence import open_store
from protocol import Message
store = open_store(sys.argv[1])
store.create_session("s")
store.append("s", Message("user", "before any provider"))
store.transcript("s")
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
store.append("s", [Message("user", "a"), Message("assistant", "b")])
store.transcript("s")
store.close()
for span in exporter.get_finished_spans():
    print(span.name, span.attributes.get("session_actors.messages"))
"""


def test_spans_start_with_the_first_append_after_a_provider_is_set(tmp_path) -> None:
    # Appends skip their span while no tracer provider is set; the first append and read
    # after `set_tracer_provider` are traced (a "no provider" answer is never kept).
    db = str(tmp_path / "state.db")
    result = subprocess.run([sys.executable, "-c", PROVIDER_LATER, db], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["session_actors.append 2", "session_actors.read 3"]
