"""Bearer tokens: the token file, its lines, and who a request's token says it is.

One token a line: ``NAME SCOPE[,SCOPE] [source=S] sha256:HEX``. Only the SHA-256 of a
token is stored, so the file can be read by whoever runs the service without
handing out the tokens themselves. Blank lines and lines starting with ``#`` are
ignored. Scopes: ``read`` (reads, the event stream), ``write`` (appends, turns,
compactions, metadata; implies nothing else), ``admin`` (erasure, metrics and every
other scope). A token with ``source=S`` reaches only sessions whose source is S.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from protocol import ConfigurationError, InvalidArgumentError

__all__ = ["SCOPES", "Token", "TokenFile", "add_token"]

SCOPES = ("read", "write", "admin")
_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,64}")
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


@dataclass(frozen=True, slots=True)
class Token:
    """Who a request is: a token's line, without the token."""

    name: str
    scopes: frozenset[str]
    source: str | None
    digest: str

    def allows(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    def line(self) -> str:
        source = f" source={self.source}" if self.source is not None else ""
        return f"{self.name} {','.join(s for s in SCOPES if s in self.scopes)}{source} sha256:{self.digest}"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenFile:
    """The tokens of a token file, read once (restart the service to change them)."""

    def __init__(self, tokens: list[Token]) -> None:
        self._by_digest = {t.digest: t for t in tokens}
        if len(self._by_digest) < len(tokens):
            raise ConfigurationError("the token file holds one token twice")
        names = [t.name for t in tokens]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ConfigurationError(f"the token file names {', '.join(map(repr, twice))} on more than one line")

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> TokenFile:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read the token file {str(path)!r}: {exc.strerror or exc}") from None
        tokens = []
        for number, raw in enumerate(text.splitlines(), 1):
            if raw.strip() and not raw.lstrip().startswith("#"):
                tokens.append(_parse_line(raw, f"{path}:{number}"))
        return cls(tokens)

    def __len__(self) -> int:
        return len(self._by_digest)

    def digests(self) -> list[str]:
        """Every token's SHA-256 (hex): what the service keys its turn ids with."""
        return list(self._by_digest)

    def names(self) -> list[str]:
        return sorted(t.name for t in self._by_digest.values())

    def identify(self, secret: str) -> Token | None:
        """The token ``secret`` is, or None. The look-up is by its digest, so how long
        it takes says nothing about how close a guess came to a token."""
        return self._by_digest.get(_digest(secret))


def _parse_line(line: str, where: str) -> Token:
    words = line.split()
    if len(words) not in (3, 4):
        raise ConfigurationError(f"{where}: expected 'NAME SCOPE[,SCOPE] [source=S] sha256:HEX'")
    name, scopes, *middle, digest = words
    if not _NAME.fullmatch(name):
        raise ConfigurationError(f"{where}: bad token name {name!r}")
    chosen = frozenset(scopes.split(","))
    if not chosen or not chosen <= set(SCOPES):
        raise ConfigurationError(f"{where}: scopes must be from {', '.join(SCOPES)}, got {scopes!r}")
    source = None
    if middle:
        if not middle[0].startswith("source="):
            raise ConfigurationError(f"{where}: expected source=S, got {middle[0]!r}")
        source = middle[0].removeprefix("source=")
        if not source:
            raise ConfigurationError(f"{where}: source= names no source")
    found = _DIGEST.fullmatch(digest)
    if found is None:
        raise ConfigurationError(f"{where}: the last word must be sha256: and 64 hex digits")
    return Token(name, chosen, source, found.group(1))


def add_token(path: str | os.PathLike[str], name: str, scopes: list[str], source: str | None = None) -> str:
    """Append a new token's line to the file (created, mode 0600, when missing) and
    return the token: the only time it is ever seen."""
    if not _NAME.fullmatch(name):
        raise InvalidArgumentError(f"a token name is 1-64 of A-Z a-z 0-9 _ . : @ -, got {name!r}")
    if not scopes or not set(scopes) <= set(SCOPES):
        raise InvalidArgumentError(f"scopes must be from {', '.join(SCOPES)}, got {','.join(scopes)!r}")
    if source is not None and (not source or source != "".join(source.split()) or "\x00" in source):
        raise InvalidArgumentError(f"a token's source is one word (no whitespace), got {source!r}")
    existing = TokenFile.read(path) if Path(path).exists() else TokenFile([])
    if name in existing.names():
        raise InvalidArgumentError(f"the token file already has a token named {name!r}")
    secret = "sa_" + secrets.token_urlsafe(32)
    token = Token(name, frozenset(scopes), source, _digest(secret))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as out:
        out.write(token.line() + "\n")
    return secret
