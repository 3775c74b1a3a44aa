"""Pick a backend from a URL or a path."""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote_plus

from protocol import ConfigurationError

from ._store import Store

__all__ = ["STORE_URL_OPTIONS", "display_url", "open_store", "parse_store_url", "scrubbed", "split_store_options"]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
#: Query parameters whose values are masked when a URL is shown (libpq's
#: ``password`` and ``sslpassword``, and anything else that looks like a secret).
_SECRET_KEY = re.compile(r"pass|secret|token|api[-_]?key|credential", re.I)


def parse_store_url(url_or_path: str | os.PathLike[str]) -> tuple[str, str]:
    """Return ``(backend, target)``: ``("sqlite", path)`` or ``("postgresql", url)``.

    Raises: `ConfigurationError` for an empty value or an unknown scheme.
    """
    text = os.fspath(url_or_path)
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError("empty database URL or path")
    _check_characters(text)
    if text.startswith(_POSTGRES_SCHEMES):
        return "postgresql", text
    if text.startswith("sqlite://"):
        path = text[len("sqlite://") :]
        if path.startswith("/"):
            path = path[1:] or ""
        if not path or path == ":memory:":
            raise ConfigurationError(f"sqlite URL needs a file path: {text!r}")
        return "sqlite", path
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise ConfigurationError(
            f"unsupported database URL scheme {scheme!r}: use a path, sqlite:///path or postgresql://..."
        )
    if text == ":memory:":
        raise ConfigurationError("in-memory SQLite is not durable; give a file path")
    return "sqlite", text


def _check_characters(text: str) -> None:
    """No NUL (neither SQLite nor libpq takes one) and no lone surrogate (not
    encodable); the message names the position, never the text (it may hold a secret)."""
    nul = text.find("\x00")
    if nul >= 0:
        raise ConfigurationError(f"the database URL or path holds a NUL character (at position {nul})")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigurationError(
            f"the database URL or path holds a lone surrogate (at position {exc.start}): not valid Unicode"
        ) from None


def scrubbed(message: str, url: str) -> str:
    """``message`` (a driver's, say) with ``url`` and every secret in it masked: the
    URL's password and the values of its secret-looking query parameters."""
    message = message.replace(url, display_url(url))
    for secret in _secrets(url):
        message = message.replace(secret, "***")
    return message


def _secrets(url: str) -> list[str]:
    if "://" not in url:
        return []
    rest = url.split("://", 1)[1]
    found = []
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    if "@" in netloc and ":" in netloc.rsplit("@", 1)[0]:
        found.append(netloc.rsplit("@", 1)[0].split(":", 1)[1])
    if "?" in rest:
        for pair in rest.split("?", 1)[1].split("#", 1)[0].split("&"):
            key, equals, value = pair.partition("=")
            if equals and value and _SECRET_KEY.search(unquote_plus(key)):
                found += [value, unquote_plus(value)]
            elif equals and "password" in unquote_plus(value).lower():  # options=-c password=...
                found += [value, unquote_plus(value)]
    return sorted({s for s in found if len(s) >= 3}, key=len, reverse=True)


def display_url(url_or_path: str | os.PathLike[str]) -> str:
    """The URL with every password masked (user info and query parameters alike),
    safe to print or log. A plain path is returned as is."""
    text = os.fspath(url_or_path)
    if "://" not in text:
        return text
    scheme, rest = text.split("://", 1)
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    if "@" in netloc:
        userinfo, hosts = netloc.rsplit("@", 1)
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:***@{hosts}"
    if "?" in tail:
        path, query = tail.split("?", 1)
        query, hash_mark, fragment = query.partition("#")
        tail = f"{path}?{_masked_query(query)}{hash_mark}{fragment}"
    return f"{scheme}://{netloc}{tail}"


def _masked_query(query: str) -> str:
    """``key=value`` pairs with the value of every secret-looking key replaced by ``***``."""
    pairs = []
    for pair in query.split("&"):
        key, equals, value = pair.partition("=")
        # libpq's options=-c password=... hides a secret inside a value too
        if equals and (_SECRET_KEY.search(unquote_plus(key)) or _SECRET_KEY.search(unquote_plus(value))):
            pair = f"{key}=***"
        pairs.append(pair)
    return "&".join(pairs)


#: Query options the store itself takes from a URL, per backend (removed before the
#: driver sees the URL). PostgreSQL passes every other option to libpq, which
#: refuses one it does not know; a SQLite URL takes only these.
STORE_URL_OPTIONS: dict[str, tuple[str, ...]] = {"postgresql": ("pgbouncer",), "sqlite": ()}
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def split_store_options(url_or_path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """``(url, options)``: the URL without the store's own query options, and those
    options as values (``pgbouncer=true`` -> ``{"pgbouncer": True}``).

    Raises: `ConfigurationError` for a bad value, or an option a SQLite URL does not take.
    """
    text = os.fspath(url_or_path)
    if "://" not in text or "?" not in text:
        return text, {}
    backend = "postgresql" if text.startswith(_POSTGRES_SCHEMES) else "sqlite"
    base, query = text.split("?", 1)
    known, kept, options = STORE_URL_OPTIONS.get(backend, ()), [], {}
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        name = unquote_plus(key)
        if name not in known:
            kept.append(pair)
            continue
        value = unquote_plus(value).strip().lower()
        if value not in _TRUE + _FALSE:
            raise ConfigurationError(f"URL option {name} must be true or false, got {value!r}")
        options[name] = value in _TRUE
    if backend == "sqlite" and any(kept):
        names = sorted({unquote_plus(p.partition("=")[0]) for p in kept if p})
        raise ConfigurationError(
            f"unknown SQLite URL option(s) {', '.join(names)}: a SQLite URL "
            f"takes only the store's own options ({', '.join(known) or 'none'})"
        )
    rest = "&".join(p for p in kept if p)
    return (f"{base}?{rest}" if rest else base), options


def open_store(
    url_or_path: str | os.PathLike[str],
    *,
    readonly: bool = False,
    migrate: bool = True,
    **options: Any,
) -> Store:
    """Open the store at ``url_or_path``; ``options`` go to the backend's constructor.

    ``readonly=True`` never takes a write lock and never writes (every write method
    raises `ReadOnlyStoreError`); reads work while another connection holds the
    write lock. ``migrate=False`` never changes the schema. Neither creates a
    missing SQLite file.

    Raises: `ConfigurationError` for a bad URL or a missing optional driver;
    `SchemaVersionError` when the database is newer than this code, or older and
    ``readonly`` or ``migrate=False`` forbids upgrading it (``session-actors migrate``).
    """
    url, url_options = split_store_options(url_or_path)
    for name, value in url_options.items():
        if options.setdefault(name, value) != value:
            raise ConfigurationError(f"{name}={options[name]!r} contradicts the URL's {name}={value!r}")
    backend, target = parse_store_url(url)
    if backend == "postgresql":
        from .postgres import PostgresStore  # lazy: psycopg is an optional extra

        return PostgresStore(target, readonly=readonly, migrate=migrate, **options)
    from .sqlite import SqliteStore

    return SqliteStore(target, readonly=readonly, migrate=migrate, **options)
