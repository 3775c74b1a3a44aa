"""The OpenTelemetry SDK with in-memory exporters, as an application would install it.

Global providers can be set once per process, so `install` sets them on first use and
every later test reads the same reader and exporter: counters are cumulative, so a test
compares a figure before and after what it does (`Otel.counter`), and spans are
filtered by the session ids the test made.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

__all__ = ["Otel", "otel"]


class Otel:
    def __init__(self, reader: Any, exporter: Any) -> None:
        self.reader = reader
        self.exporter = exporter
        # Spans are kept only while a test that reads them runs: every store append is a
        # span, and the rest of the suite must not pile them up in the exporter.
        self.recording = False

    def _points(self, name: str) -> Iterator[Any]:
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        yield from metric.data.data_points

    def counter(self, name: str, **attributes: Any) -> float:
        """The cumulative value of a counter for exactly these attributes (0 if never added)."""
        return sum(p.value for p in self._points(name) if dict(p.attributes) == attributes)

    def histogram_count(self, name: str, **attributes: Any) -> int:
        """How many values a histogram recorded for exactly these attributes."""
        return sum(p.count for p in self._points(name) if dict(p.attributes) == attributes)

    def gauge(self, name: str) -> float | None:
        values = [p.value for p in self._points(name)]
        return values[-1] if values else None

    def spans(self, name: str, session_id: str | None = None) -> list[Any]:
        return [
            s
            for s in self.exporter.get_finished_spans()
            if s.name == name and (session_id is None or s.attributes.get("session_actors.session_id") == session_id)
        ]

    def children(self, parent: Any) -> list[Any]:
        return [
            s
            for s in self.exporter.get_finished_spans()
            if s.parent is not None and s.parent.span_id == parent.context.span_id
        ]


_installed: Otel | None = None


def install() -> Otel:
    global _installed
    if _installed is None:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        class WhileRecording(SimpleSpanProcessor):
            def on_end(self, span: Any) -> None:
                if installed.recording:
                    super().on_end(span)

        reader, exporter = InMemoryMetricReader(), InMemorySpanExporter()
        installed = Otel(reader, exporter)
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(WhileRecording(exporter))
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        _installed = installed
    return _installed


@pytest.fixture
def otel() -> Iterator[Otel]:
    """The SDK, installed; spans kept from this test's start to its end only."""
    installed = install()
    installed.exporter.clear()
    installed.recording = True
    try:
        yield installed
    finally:
        installed.recording = False
        installed.exporter.clear()
