"""OpenTelemetry from the actors, on both backends: the compaction span and its children,
compaction, lease, append and resident-actor metrics, read from the SDK's in-memory
exporters as an application's exporter would get them."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import trace

from actors import HeadTailCompressor
from persistence import open_store
from protocol import CompressionStatus, StoreBusyError
from tests.actors.helpers import conversation, wait_until
from tests.otel import Otel, otel

pytestmark = pytest.mark.timeout(60)

COMPACTIONS = "session_actors.compactions"
LEASES = "session_actors.lease.acquisitions"


class Exploding:
    name = "exploding"

    def compress(self, messages, *, target_tokens, cancel):
        raise RuntimeError("model unavailable")


def test_a_committed_compaction_is_one_span_with_compress_and_commit_children(otel: Otel, make_registry) -> None:
    registry = make_registry(HeadTailCompressor(keep_last=2))
    before = {
        "compacted": otel.counter(COMPACTIONS, status="compacted"),
        "acquired": otel.counter(LEASES, result="acquired"),
        "durations": otel.histogram_count("session_actors.compaction.duration", status="compacted"),
        "appends": otel.counter("session_actors.appends"),
        "append_calls": otel.histogram_count("session_actors.append.duration"),
    }
    handle = registry.session("otel:span")
    handle.append(conversation(9))  # one call, nine messages
    handle.append("user", "one more")
    outcome = handle.compress()
    assert outcome.status is CompressionStatus.COMPACTED

    [span] = otel.spans("session_actors.compaction", "otel:span")
    assert dict(span.attributes) == {
        "session_actors.session_id": "otel:span",
        "mode": "in_place",
        "status": "compacted",
        "forced": False,
        "automatic": False,
        "messages_before": 10,
        "messages_after": outcome.messages_after,
        "tail_count": 0,
    }
    children = {child.name: child for child in otel.children(span)}
    assert set(children) == {"session_actors.compress", "session_actors.commit"}
    for child in children.values():
        assert child.context.trace_id == span.context.trace_id
        assert span.start_time <= child.start_time <= child.end_time <= span.end_time

    assert otel.counter(COMPACTIONS, status="compacted") == before["compacted"] + 1
    assert otel.counter(LEASES, result="acquired") == before["acquired"] + 1
    assert otel.histogram_count("session_actors.compaction.duration", status="compacted") == before["durations"] + 1
    # the session's creation appends nothing; our two calls committed ten messages
    assert otel.counter("session_actors.appends") == before["appends"] + 10
    assert otel.histogram_count("session_actors.append.duration") == before["append_calls"] + 2


def test_a_held_lease_is_counted_and_the_span_says_why(otel: Otel, make_registry, store_url) -> None:
    registry = make_registry(HeadTailCompressor(keep_last=2))
    handle = registry.session("otel:held")
    handle.append(conversation(6))
    other = open_store(store_url)
    try:
        lease = other.acquire_lease("otel:held", "another-process", 60)
        held, skipped = (
            otel.counter(LEASES, result="held"),
            otel.counter(COMPACTIONS, status="skipped", reason="lease_held"),
        )
        outcome = handle.compress()
        other.release_lease(lease)
    finally:
        other.close()
    assert (outcome.status, outcome.reason) == (CompressionStatus.SKIPPED, "lease_held")
    assert otel.counter(LEASES, result="held") == held + 1
    assert otel.counter(COMPACTIONS, status="skipped", reason="lease_held") == skipped + 1
    [span] = otel.spans("session_actors.compaction", "otel:held")
    assert span.attributes["status"] == "skipped" and span.attributes["reason"] == "lease_held"
    assert otel.children(span) == []  # the compressor was never called


def test_a_lease_error_is_counted_as_error(otel: Otel, make_registry) -> None:
    registry = make_registry(HeadTailCompressor(keep_last=2), faulty=True)
    handle = registry.session("otel:lease-error")
    handle.append(conversation(6))

    def broken(real, *args, **kwargs):
        raise StoreBusyError("injected: the lease table is locked")

    errors = otel.counter(LEASES, result="error")
    registry.store.hooks["acquire_lease"] = broken
    outcome = handle.compress()
    assert (outcome.status, outcome.reason) == (CompressionStatus.SKIPPED, "lease_error")
    assert otel.counter(LEASES, result="error") == errors + 1


def test_a_failed_compressor_marks_the_span_as_an_error(otel: Otel, make_registry) -> None:
    registry = make_registry(Exploding())
    handle = registry.session("otel:failed")
    handle.append(conversation(6))
    failed = otel.counter(COMPACTIONS, status="failed", reason="compressor_error")
    outcome = handle.compress()
    assert outcome.status is CompressionStatus.FAILED
    assert otel.counter(COMPACTIONS, status="failed", reason="compressor_error") == failed + 1
    [span] = otel.spans("session_actors.compaction", "otel:failed")
    assert span.status.status_code.name == "ERROR"
    [compress] = otel.children(span)
    assert compress.name == "session_actors.compress"
    assert [event.name for event in compress.events] == ["exception"]
    assert "model unavailable" in compress.events[0].attributes["exception.message"]


def test_automatic_and_forced_attempts_say_so(otel: Otel, make_registry) -> None:
    registry = make_registry(HeadTailCompressor(keep_last=2), max_tokens=40)
    handle = registry.session("otel:auto")
    handle.append(conversation(12))  # past max_tokens: an automatic attempt follows
    wait_until(lambda: otel.spans("session_actors.compaction", "otel:auto"), what="the automatic attempt")
    [automatic] = otel.spans("session_actors.compaction", "otel:auto")
    assert automatic.attributes["automatic"] is True and automatic.attributes["forced"] is False
    handle.compress(force=True)
    forced = [s for s in otel.spans("session_actors.compaction", "otel:auto") if s.attributes["forced"]]
    assert len(forced) == 1 and forced[0].attributes["automatic"] is False


def test_resident_actors_gauge_follows_the_registry(otel: Otel, make_registry) -> None:
    registry = make_registry(None)
    for n in range(3):
        registry.session(f"otel:resident-{n}").append("user", "hi")
    # the plain dict keeps giving the same figure
    assert otel.gauge("session_actors.actors.resident") == registry.stats()["resident"] == 3
    registry.close()
    assert otel.gauge("session_actors.actors.resident") == 0


class Traced:
    """Makes a span of its own inside compress, as a traced HTTP client would."""

    name = "traced"

    def compress(self, messages, *, target_tokens, cancel):
        with trace.get_tracer("test").start_as_current_span("model call"):
            return HeadTailCompressor(keep_last=2).compress(messages, target_tokens=target_tokens, cancel=cancel)


class AsyncTraced(Traced):
    name = "async-traced"

    async def compress(self, messages, *, target_tokens, cancel):
        await asyncio.sleep(0)
        return super().compress(messages, target_tokens=target_tokens, cancel=cancel)


@pytest.mark.parametrize("compressor", [Traced(), AsyncTraced()], ids=["sync", "async"])
def test_the_compressors_own_spans_nest_under_compress(otel: Otel, make_registry, compressor) -> None:
    registry = make_registry(compressor)
    handle = registry.session(f"otel:nested-{compressor.name}")
    handle.append(conversation(8))
    assert handle.compress().status is CompressionStatus.COMPACTED
    [span] = otel.spans("session_actors.compaction", f"otel:nested-{compressor.name}")
    [compress] = [child for child in otel.children(span) if child.name == "session_actors.compress"]
    assert [child.name for child in otel.children(compress)] == ["model call"]
