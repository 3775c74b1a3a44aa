"""Turn ids that name the durable lease, so a turn outlives the server that opened it.

A turn id carries the turn lease's holder and token (the store's fencing token) and
when the turn opened (store clock), sealed with an HMAC over those, the session id
the turn was opened on and the digest of the bearer token that opened it. Any
process serving the same database with the same token file (a restarted server,
another worker) reads it back without shared memory: the MAC proves the id was
minted by a server of this token file for this token and this session, and the lease
token fences every use (a lease taken by someone else since answers 409).

The MAC key is derived from every token's digest in the token file: a client, which
knows only its own token, cannot derive it, so it cannot mint an id for a lease it
does not hold. Changing the token file changes the key (ids minted before no longer
verify: 404, as an unknown turn).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

from ._errors import ServiceError
from ._tokens import TokenFile

__all__ = ["TurnIds", "TurnRef"]

_PREFIX = "t1."
_MAC_BYTES = 18


@dataclass(frozen=True, slots=True)
class TurnRef:
    """What a turn id names: the lease (holder, token) and when the turn opened."""

    holder: str
    token: int
    opened_at: float


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TurnIds:
    """Mints and verifies turn ids for one token file (None: ``--insecure-local``)."""

    def __init__(self, tokens: TokenFile | None) -> None:
        digests = sorted(tokens.digests()) if tokens is not None else []
        self._key = hashlib.sha256(b"session-actors turn ids\0" + "\n".join(digests).encode()).digest()
        self._digests = digests

    def _mac(self, session_id: str, owner: str, payload: bytes) -> bytes:
        message = b"\0".join((session_id.encode("utf-8"), owner.encode("ascii"), payload))
        return hmac.new(self._key, message, hashlib.sha256).digest()[:_MAC_BYTES]

    def mint(self, session_id: str, owner: str, ref: TurnRef) -> str:
        payload = f"{ref.holder}\n{ref.token}\n{ref.opened_at!r}".encode()
        return f"{_PREFIX}{_b64(payload)}.{_b64(self._mac(session_id, owner, payload))}"

    def read(self, turn_id: str, session_id: str, owner: str) -> TurnRef:
        """The lease ``turn_id`` names, when it was minted for ``session_id`` and the
        token whose digest is ``owner``: 403 when it was minted for another token,
        404 when no server of this token file minted it."""
        payload, mac = self._parts(turn_id, session_id)
        if not hmac.compare_digest(mac, self._mac(session_id, owner, payload)):
            if any(hmac.compare_digest(mac, self._mac(session_id, other, payload)) for other in self._digests):
                raise ServiceError(403, "Forbidden", f"turn {turn_id!r} was opened by another token")
            raise _unknown(turn_id, session_id)
        holder, token, opened = payload.decode().split("\n")
        return TurnRef(holder, int(token), float(opened))

    @staticmethod
    def _parts(turn_id: str, session_id: str) -> tuple[bytes, bytes]:
        body, _, mac = turn_id.removeprefix(_PREFIX).partition(".")
        if not turn_id.startswith(_PREFIX) or not body or not mac:
            raise _unknown(turn_id, session_id)
        try:
            return _unb64(body), _unb64(mac)
        except (binascii.Error, ValueError):
            raise _unknown(turn_id, session_id) from None


def _unknown(turn_id: str, session_id: str) -> ServiceError:
    return ServiceError(404, "TurnNotFound", f"no turn {turn_id!r} on {session_id!r}")
