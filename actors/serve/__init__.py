"""``session-actors serve``: every session operation over HTTP/JSON for gateways in
any language, a server-sent event stream of compaction outcomes, and a web console.

The ``serve`` extra (FastAPI and uvicorn): ``pip install 'session-actors[serve]'``.
`create_app` builds the ASGI application (one store, one registry); `serve` runs it
under uvicorn; `TokenFile` and `add_token` are the bearer tokens it checks.
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401  (the extra's presence, checked once with a clear error)
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by a fresh install without the extra
    from protocol import ConfigurationError

    raise ConfigurationError(
        f"session-actors serve needs the serve extra: pip install 'session-actors[serve]' ({exc.name} is missing)"
    ) from None

from ._app import ServeLimits, create_app
from ._server import serve
from ._tokens import SCOPES, Token, TokenFile, add_token

__all__ = ["SCOPES", "ServeLimits", "Token", "TokenFile", "add_token", "create_app", "serve"]
