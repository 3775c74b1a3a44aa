"""OpenTelemetry spans and metrics, through the ``otel`` extra (``opentelemetry-api``).

One module both layers use: the stores count appends and busy retries, the actors
trace compaction attempts and count lease acquisitions. Without the extra nothing is
imported and every hook is an empty call; with it, the API's instruments are no-ops
until the application configures an SDK (``set_tracer_provider`` /
``set_meter_provider``), before or after this module was first used: the API's proxy
tracer and meter pick the SDK up when it arrives.

Names (docs/observability.md): span ``session_actors.compaction`` per attempt with child
spans ``session_actors.compress`` and ``session_actors.commit``; a span
``session_actors.append`` per store append call and ``session_actors.read`` per
transcript or archive read, their attributes under ``session_actors.``; metrics
``session_actors.appends``, ``session_actors.append.duration``,
``session_actors.compactions``, ``session_actors.compaction.duration``,
``session_actors.lease.acquisitions``, ``session_actors.actors.resident``,
``session_actors.store.busy_retries``.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol, TypeVar, cast

__all__ = [
    "CompactionTrace",
    "ResidentSource",
    "appended",
    "busy_retry",
    "compaction",
    "enabled",
    "lease_acquisition",
    "timed_append",
    "traced_read",
    "track_resident",
]

log = logging.getLogger("session_actors.telemetry")
log.addHandler(logging.NullHandler())

SCOPE = "session_actors"

# Seconds, not the SDK's default millisecond-shaped buckets.
_APPEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_COMPACTION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)


class ResidentSource(Protocol):
    """What the gauge reads: a `SessionRegistry`, whose ``stats()["resident"]`` it reports."""

    def stats(self) -> Mapping[str, int]: ...


class CompactionTrace:
    """One attempt's span and figures; this base class records nothing (no extra)."""

    def phase(self, name: str) -> AbstractContextManager[Any]:
        """A child span ``session_actors.<name>`` (``compress``, ``commit``), on any thread."""
        return nullcontext()

    def finish(self, outcome: Any) -> None:
        """End the span with the outcome's attributes; count and time the attempt."""

    def fail(self, error: BaseException) -> None:
        """End the span for an attempt that raised instead of producing an outcome."""


_NO_TRACE = CompactionTrace()


class _Hooks:
    """Every hook as an empty method: what runs without the extra."""

    enabled = False

    def tracing(self) -> bool:
        """True when a span made now would reach a tracer provider (see `_OtelHooks.tracing`)."""
        return False

    def appended(self, count: int, seconds: float) -> None:
        pass

    def span(self, name: str, session_id: str, **attributes: str) -> AbstractContextManager[Any]:
        return nullcontext()

    def busy_retry(self) -> None:
        pass

    def lease_acquisition(self, result: str) -> None:
        pass

    def compaction(self, session_id: str, *, mode: str, forced: bool, automatic: bool) -> CompactionTrace:
        return _NO_TRACE

    def track_resident(self, source: ResidentSource) -> None:
        pass


class _OtelHooks(_Hooks):
    """The hooks on ``opentelemetry-api``'s global tracer and meter."""

    enabled = True

    def __init__(self, metrics: Any, trace: Any) -> None:
        self.trace_api = trace  # the opentelemetry.trace module
        self.tracer = trace.get_tracer(SCOPE)
        self._traced = False  # a tracer provider was seen: from then on always (see `tracing`)
        meter = metrics.get_meter(SCOPE)
        self._observation = metrics.Observation
        self._appends = meter.create_counter(
            "session_actors.appends", unit="{message}", description="messages appended (durable)"
        )
        self._append_duration = meter.create_histogram(
            "session_actors.append.duration",
            unit="s",
            description="time of one store append call",
            explicit_bucket_boundaries_advisory=_APPEND_BUCKETS,
        )
        self.compactions = meter.create_counter(
            "session_actors.compactions",
            unit="{attempt}",
            description="compaction attempts by outcome status and reason",
        )
        self.compaction_duration = meter.create_histogram(
            "session_actors.compaction.duration",
            unit="s",
            description="time of one compaction attempt",
            explicit_bucket_boundaries_advisory=_COMPACTION_BUCKETS,
        )
        self._leases = meter.create_counter(
            "session_actors.lease.acquisitions",
            unit="{acquisition}",
            description="compaction lease acquisitions by result (acquired, held, error)",
        )
        self._busy = meter.create_counter(
            "session_actors.store.busy_retries",
            unit="{retry}",
            description="store operations retried because the database was busy",
        )
        self._sources: weakref.WeakSet[Any] = weakref.WeakSet()
        self._sources_lock = threading.Lock()
        meter.create_observable_gauge(
            "session_actors.actors.resident",
            callbacks=[self._observe_resident],
            unit="{actor}",
            description="session actors resident in this process",
        )

    def tracing(self) -> bool:
        """Whether the application has set a tracer provider. Until it has, the API's
        proxy tracer makes non-recording spans that reach nobody, at ~4 us of CPU each
        on the append path every caller shares the GIL on: skip them. A provider is set
        once per process (the API refuses a second), so the first True is kept; until
        then each call asks again, so spans start with the first append after
        ``set_tracer_provider``. It reads the module global the proxy tracer itself reads
        on every span (the public ``get_tracer_provider()`` costs ~0.6 us: it looks up an
        environment variable each call); should a later API drop that global, every
        append is traced again, as the proxy would."""
        if self._traced:
            return True
        self._traced = getattr(self.trace_api, "_TRACER_PROVIDER", True) is not None
        return self._traced

    def appended(self, count: int, seconds: float) -> None:
        self._appends.add(count)
        self._append_duration.record(seconds)

    def span(self, name: str, session_id: str, **attributes: str) -> AbstractContextManager[Any]:
        """A span current on this thread; an exception leaving it is recorded (status ERROR)."""
        named = {"session_actors.session_id": session_id, **{f"session_actors.{k}": v for k, v in attributes.items()}}
        return self.tracer.start_as_current_span(name, attributes=named)

    def busy_retry(self) -> None:
        self._busy.add(1)

    def lease_acquisition(self, result: str) -> None:
        self._leases.add(1, {"result": result})

    def compaction(self, session_id: str, *, mode: str, forced: bool, automatic: bool) -> CompactionTrace:
        return _OtelCompaction(self, session_id, mode=mode, forced=forced, automatic=automatic)

    def track_resident(self, source: ResidentSource) -> None:
        with self._sources_lock:
            self._sources.add(source)

    def _observe_resident(self, _options: Any) -> Iterator[Any]:
        with self._sources_lock:
            sources = list(self._sources)
        total = 0
        for source in sources:
            try:
                total += source.stats()["resident"]
            except Exception:  # a closing registry must not break the collection
                log.debug("resident count unavailable", exc_info=True)
        yield self._observation(total)


class _OtelCompaction(CompactionTrace):
    def __init__(self, hooks: _OtelHooks, session_id: str, *, mode: str, forced: bool, automatic: bool) -> None:
        self._hooks = hooks
        self._started = time.monotonic()
        self._done = threading.Lock()
        self._finished = False
        self.span = hooks.tracer.start_span(
            "session_actors.compaction",
            attributes={
                "session_actors.session_id": session_id,
                "mode": mode,
                "forced": bool(forced),
                "automatic": bool(automatic),
            },
        )

    @contextmanager
    def phase(self, name: str) -> Iterator[Any]:
        context = self._hooks.trace_api.set_span_in_context(self.span)
        # current on this thread, so a traced HTTP client inside the compressor nests under it
        with self._hooks.tracer.start_as_current_span(f"session_actors.{name}", context=context) as span:
            yield span

    def _claim(self) -> bool:
        with self._done:
            if self._finished:
                return False
            self._finished = True
            return True

    def finish(self, outcome: Any) -> None:
        if not self._claim():
            return
        status = outcome.status.value
        record = outcome.record
        attributes = {
            "status": status,
            "messages_before": outcome.messages_before,
            "messages_after": outcome.messages_after,
            "tail_count": record.tail_count if record is not None else 0,
        }
        if outcome.reason:
            attributes["reason"] = outcome.reason
        self.span.set_attributes(attributes)
        if status == "failed":
            self.span.set_status(
                self._hooks.trace_api.Status(self._hooks.trace_api.StatusCode.ERROR, outcome.reason or "failed")
            )
        self._end(status, outcome.reason)

    def fail(self, error: BaseException) -> None:
        if not self._claim():
            return
        reason = type(error).__name__
        self.span.set_attributes({"status": "error", "reason": reason})
        self.span.record_exception(error)
        self.span.set_status(self._hooks.trace_api.Status(self._hooks.trace_api.StatusCode.ERROR, reason))
        self._end("error", reason)

    def _end(self, status: str, reason: str | None) -> None:
        counted = {"status": status} if not reason else {"status": status, "reason": reason}
        self._hooks.compactions.add(1, counted)
        self._hooks.compaction_duration.record(time.monotonic() - self._started, {"status": status})
        self.span.end()


_hooks: _Hooks | None = None
_load_lock = threading.Lock()


def _load() -> _Hooks:
    global _hooks
    with _load_lock:
        if _hooks is None:
            try:
                from opentelemetry import metrics, trace
            except ImportError:  # no extra: stay silent and import nothing else
                _hooks = _Hooks()
            else:
                _hooks = _OtelHooks(metrics, trace)
        return _hooks


def _current() -> _Hooks:
    hooks = _hooks
    return hooks if hooks is not None else _load()


def enabled() -> bool:
    """True when the ``otel`` extra is installed (spans and metrics go to its API)."""
    return _current().enabled


def appended(count: int, seconds: float) -> None:
    """A store append call committed ``count`` messages in ``seconds``."""
    _current().appended(count, seconds)


def busy_retry() -> None:
    """A store operation is retried because the database was busy."""
    _current().busy_retry()


def lease_acquisition(result: str) -> None:
    """A compaction attempt tried the lease: ``acquired``, ``held`` or ``error``."""
    _current().lease_acquisition(result)


def compaction(session_id: str, *, mode: str, forced: bool, automatic: bool) -> CompactionTrace:
    """Start the span of one compaction attempt; end it with `CompactionTrace.finish`."""
    return _current().compaction(session_id, mode=mode, forced=forced, automatic=automatic)


def track_resident(source: ResidentSource) -> None:
    """Add ``source.stats()["resident"]`` to the resident-actors gauge while ``source`` lives."""
    _current().track_resident(source)


_Append = TypeVar("_Append", bound=Callable[..., Sequence[Any]])


def timed_append(append: _Append) -> _Append:
    """Decorate a store's ``append(session_id, messages, *, incarnation=None, turn=None)``: count
    the messages it committed, time the call and, once a tracer provider is set, trace it
    as a span ``session_actors.append`` (on every append: kept to the bone)."""
    clock = time.perf_counter

    @functools.wraps(append)
    def timed(
        self: Any, session_id: str, messages: Any, *, incarnation: str | None = None, turn: Any = None
    ) -> Sequence[Any]:
        hooks = _hooks
        if hooks is None:
            hooks = _load()
        started = clock()
        if not hooks.tracing():
            stored = append(self, session_id, messages, incarnation=incarnation, turn=turn)
        else:
            with hooks.span("session_actors.append", session_id) as span:
                stored = append(self, session_id, messages, incarnation=incarnation, turn=turn)
                span.set_attribute("session_actors.messages", len(stored))
        hooks.appended(len(stored), clock() - started)
        return stored

    return cast(_Append, timed)  # the same signature as append, by functools.wraps


_Read = TypeVar("_Read", bound=Callable[..., Sequence[Any]])


def traced_read(operation: str) -> Callable[[_Read], _Read]:
    """Decorate a store's ``transcript(session_id)`` or ``archive(session_id)``: once a
    tracer provider is set, a span ``session_actors.read`` (``session_actors.operation``,
    the messages read)."""

    def decorate(read: _Read) -> _Read:
        @functools.wraps(read)
        def traced(self: Any, session_id: str, *args: Any, **kwargs: Any) -> Sequence[Any]:
            hooks = _hooks
            if hooks is None:
                hooks = _load()
            if not hooks.tracing():
                return read(self, session_id, *args, **kwargs)
            with hooks.span("session_actors.read", session_id, operation=operation) as span:
                rows = read(self, session_id, *args, **kwargs)
                span.set_attribute("session_actors.messages", len(rows))
                return rows

        return cast(_Read, traced)

    return decorate
