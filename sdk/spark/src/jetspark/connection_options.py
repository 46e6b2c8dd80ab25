"""Connection options shared by the source, the sinks and the offsets helpers: TLS and
credentials (``tls``, ``tlsCa``, ``tlsCert``, ``tlsKey``, ``tlsServerHostname``, ``token``,
``user``, ``password``; spec/spark.md, "Connection security").

Pure code: no I/O, no Spark.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from jetspark.errors import OptionError

__all__ = [
    "NO_SECURITY",
    "SECURITY_OPTIONS",
    "Security",
    "parse_bool",
    "parse_security",
    "security_args",
    "security_options",
]

SECURITY_OPTIONS = (
    "tls",
    "tlsCa",
    "tlsCert",
    "tlsKey",
    "tlsServerHostname",
    "token",
    "user",
    "password",
)
"""Connection options shared by the source and the sinks (TLS and credentials)."""


@attrs.frozen
class Security:
    """How to connect: TLS and credentials (secrets never appear in ``repr``)."""

    tls: bool = False
    """Connect with TLS (also on when any of the TLS files is given)."""
    tls_ca: str | None = None
    """PEM CA bundle to verify servers with (default: the system's)."""
    tls_cert: str | None = None
    """PEM client certificate to present (with ``tls_key``)."""
    tls_key: str | None = None
    """PEM key of ``tls_cert``."""
    server_hostname: str | None = None
    """Name checked against server certificates (default: each address's host)."""
    token: str | None = attrs.field(default=None, repr=False)
    """Bearer token (secret)."""
    user: str | None = None
    """User name (with ``password``)."""
    password: str | None = attrs.field(default=None, repr=False)
    """Password of ``user`` (secret)."""

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :class:`jetsdk.Client`."""
        return {
            "tls": True if self.tls else None,
            "tls_ca": self.tls_ca,
            "tls_cert": self.tls_cert,
            "tls_key": self.tls_key,
            "server_hostname": self.server_hostname,
            "token": self.token,
            "user": self.user,
            "password": self.password,
        }


NO_SECURITY = Security()
"""Plain TCP, no credentials."""


def security_options(raw: Mapping[str, str]) -> Security:
    """Parse only the connection options (:data:`SECURITY_OPTIONS`); others are ignored.

    Raises:
        OptionError: naming the first bad option (never showing a secret's value).
    """
    opts = {k.lower(): str(v) for k, v in raw.items() if k.lower() in _SECURITY_LOWER}
    return parse_security(opts)


def security_args(
    *,
    tls: bool | None = None,
    tls_ca: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    server_hostname: str | None = None,
    token: str | None = None,
    user: str | None = None,
    password: str | None = None,
) -> dict[str, str]:
    """The Python keyword arguments of :func:`jetspark.foreach_batch_sink` and the offsets
    helpers as raw options (``tls_ca`` -> ``tlsCa``, ``server_hostname`` ->
    ``tlsServerHostname``; None left out), for :func:`sink_options` or
    :func:`security_options`."""
    raw: dict[str, str] = {}
    if tls is not None:
        raw["tls"] = "true" if tls else "false"
    for option, value in (
        ("tlsCa", tls_ca),
        ("tlsCert", tls_cert),
        ("tlsKey", tls_key),
        ("tlsServerHostname", server_hostname),
        ("token", token),
        ("user", user),
        ("password", password),
    ):
        if value is not None:
            raw[option] = str(value)
    return raw


_SECURITY_LOWER = frozenset(name.lower() for name in SECURITY_OPTIONS)


def parse_security(opts: Mapping[str, str]) -> Security:
    """The connection options of ``opts`` (keys already lower case) as a :class:`Security`.

    Raises:
        OptionError: naming the first bad option (never showing a secret's value).
    """
    values: dict[str, str | None] = {}
    for option in SECURITY_OPTIONS[1:]:
        text = opts.get(option.lower())
        if text is not None and not text.strip():
            raise OptionError(option, "must not be empty")
        values[option] = text
    files = [values["tlsCa"], values["tlsCert"], values["tlsKey"]]
    tls_text = opts.get("tls")
    tls = parse_bool(opts, "tls", False)
    if tls_text is not None and not tls and any(f is not None for f in files):
        raise OptionError("tls", "is false but tlsCa, tlsCert or tlsKey is given")
    tls = tls or any(f is not None for f in files)
    if (values["tlsCert"] is None) != (values["tlsKey"] is None):
        option = "tlsKey" if values["tlsKey"] is None else "tlsCert"
        raise OptionError(option, "tlsCert and tlsKey go together")
    if values["tlsServerHostname"] is not None and not tls:
        raise OptionError("tlsServerHostname", "only with TLS (tls=true or a tls* file)")
    token, user, password = values["token"], values["user"], values["password"]
    if token is not None and (user is not None or password is not None):
        raise OptionError("token", "give either token or user + password, not both")
    if (user is None) != (password is None):
        raise OptionError(
            "password" if password is None else "user", "user and password go together"
        )
    return Security(
        tls=tls,
        tls_ca=values["tlsCa"],
        tls_cert=values["tlsCert"],
        tls_key=values["tlsKey"],
        server_hostname=values["tlsServerHostname"],
        token=token,
        user=user,
        password=password,
    )


def parse_bool(opts: Mapping[str, str], option: str, default: bool) -> bool:
    """Option ``option`` of ``opts`` (keys lower case) as ``true``/``false``, else
    ``default`` when absent.

    Raises:
        OptionError: any other text.
    """
    text = opts.get(option.lower())
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise OptionError(option, f"{text!r} is not true or false")
