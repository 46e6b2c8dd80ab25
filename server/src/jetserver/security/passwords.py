"""Password and token hashes for the ``[auth]`` section (hashlib only).

- Passwords: ``scrypt$<n>$<r>$<p>$<salt b64>$<hash b64>`` (RFC 7914; n=2^14, r=8, p=1 by
  default, 16-byte salt, 32-byte hash). Verification costs ~50 ms of CPU: callers run it in a
  worker thread.
- Tokens: ``sha256$<hex>``. Tokens are long random secrets (``jet passwd --token`` makes
  one), so a fast hash is enough and lets the server find the identity by lookup.

Comparisons are constant-time (``hmac.compare_digest``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

from jetserver.errors import ConfigError

SCRYPT_N = 1 << 14
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
HASH_BYTES = 32
TOKEN_BYTES = 32
"""Random bytes in a generated token (base64url: 43 characters)."""
MAX_SCRYPT_N = 1 << 20
"""Refuse configured hashes costlier than this (a typo must not stall every login)."""
INTERNAL_IDENTITY = "__internal"
"""The identity of other servers (every right); reserved."""
_IDENTITY = re.compile(r"^[A-Za-z0-9_.@-]{1,255}$")


def check_identity(name: str) -> str:
    """``name`` if it is a valid identity (1-255 of ``[A-Za-z0-9_.@-]``, not reserved).

    Raises:
        ValueError: otherwise.
    """
    if not _IDENTITY.match(name) or name == INTERNAL_IDENTITY:
        raise ValueError(f"bad identity {name!r}: 1-255 characters of [A-Za-z0-9_.@-]")
    return name


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, *, n: int = SCRYPT_N) -> str:
    """A new ``scrypt$...`` hash of ``password`` (random salt)."""
    salt = secrets.token_bytes(SALT_BYTES)
    digest = hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=SCRYPT_R, p=SCRYPT_P, dklen=HASH_BYTES
    )
    return f"scrypt${n}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def hash_token(token: str) -> str:
    """``sha256$<hex>`` of ``token``."""
    return "sha256$" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A new random token (URL-safe)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def _check_hash(text: str) -> None:
    parts = text.split("$")
    if parts[0] == "sha256" and len(parts) == 2 and re.fullmatch(r"[0-9a-f]{64}", parts[1]):
        return
    if parts[0] == "scrypt" and len(parts) == 6:
        try:
            n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
            base64.b64decode(parts[4], validate=True)
            base64.b64decode(parts[5], validate=True)
        except ValueError:
            pass
        else:
            if 1 < n <= MAX_SCRYPT_N and n & (n - 1) == 0 and 0 < r <= 64 and 0 < p <= 16:
                return
    raise ConfigError(f"not a hash made by `jet passwd`: {text[:20]!r}...")


def parse_entry(entry: str) -> tuple[str, str]:
    """``"identity=hash"`` -> ``(identity, hash)``.

    Raises:
        ConfigError: malformed entry, bad identity or hash.
    """
    identity, sep, digest = entry.partition("=")
    if not sep:
        raise ConfigError(f"an auth entry must be written identity=hash, got {entry[:40]!r}")
    try:
        check_identity(identity)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    _check_hash(digest)
    return identity, digest


def verify_password(password: str, stored: str) -> bool:
    """True if ``password`` matches the ``scrypt$...`` hash ``stored`` (CPU-heavy)."""
    parts = stored.split("$")
    if parts[0] != "scrypt" or len(parts) != 6:
        return False
    n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
    salt, expected = base64.b64decode(parts[4]), base64.b64decode(parts[5])
    digest = hashlib.scrypt(
        password.encode("utf-8"),
        salt=salt,
        n=n,
        r=r,
        p=p,
        dklen=len(expected),
        maxmem=256 * n * r + (1 << 20),
    )
    return hmac.compare_digest(digest, expected)
