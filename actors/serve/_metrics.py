"""``GET /metrics``: the registry's counters and the service's, in Prometheus' text
format (no client library: a handful of gauges and counters do not need one)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ._service import Service

__all__ = ["StatusCounter", "render"]

_REGISTRY_HELP = {
    "resident": ("gauge", "session actors resident in memory"),
    "known_ids": ("gauge", "session ids the registry routes"),
    "attempts_in_flight": ("gauge", "compaction attempts in flight"),
    "stopping": ("gauge", "actors stopping"),
    "draining": ("gauge", "1 while a draining shutdown runs"),
    "actors_started": ("counter", "session actors started"),
    "actors_stopped": ("counter", "session actors stopped"),
    "compress_requests": ("counter", "compaction requests"),
}


class StatusCounter:
    """ASGI middleware counting answered requests by status code."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.counts: Counter[int] = Counter()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message: Any) -> None:
            if message["type"] == "http.response.start":
                self.counts[message["status"]] += 1
            await send(message)

        await self.app(scope, receive, counted)


def render(service: Service, statuses: StatusCounter) -> str:
    lines = []
    for name, value in service.registry.stats().items():
        kind, text = _REGISTRY_HELP.get(name, ("gauge", name.replace("_", " ")))
        metric = f"session_actors_{name}" + ("_total" if kind == "counter" else "")
        lines += [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}", f"{metric} {value}"]
    for name, value in service.stats().items():
        metric = f"session_actors_{name}"
        lines += [f"# HELP {metric} {name.replace('_', ' ')}", f"# TYPE {metric} gauge", f"{metric} {value}"]
    lines += [
        "# HELP session_actors_http_responses_total HTTP responses by status",
        "# TYPE session_actors_http_responses_total counter",
    ]
    for status, count in sorted(statuses.counts.items()):
        lines.append(f'session_actors_http_responses_total{{status="{status}"}} {count}')
    lines += [
        "# HELP session_actors_compaction_events_total compaction outcomes published",
        "# TYPE session_actors_compaction_events_total counter",
    ]
    lines.append(f"session_actors_compaction_events_total {service.hub.published}")
    return "\n".join(lines) + "\n"
