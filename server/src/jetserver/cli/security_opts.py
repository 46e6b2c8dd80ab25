"""Client-side TLS and credential options shared by every client command (``jet stream``,
``jet pub``, ``jet sub``, ``jet acl``).

Flags: ``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-server-name``, ``--token``,
``--user``. Secrets may come from the environment instead of the command line (which other
users of the machine can see): ``JET_TOKEN``, ``JET_USER``, ``JET_PASSWORD``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

ENV_TOKEN = "JET_TOKEN"
ENV_USER = "JET_USER"
ENV_PASSWORD = "JET_PASSWORD"


def add_security_options(parser: argparse.ArgumentParser) -> None:
    """Add the TLS and credential flags."""
    group = parser.add_argument_group("security")
    group.add_argument("--tls-ca", metavar="PEM", help="CA bundle to verify servers with (TLS)")
    group.add_argument("--tls-cert", metavar="PEM", help="client certificate (TLS)")
    group.add_argument("--tls-key", metavar="PEM", help="key of --tls-cert")
    group.add_argument(
        "--tls-server-name", metavar="NAME", help="name checked on server certificates"
    )
    group.add_argument("--token", help=f"authenticate with a token (or ${ENV_TOKEN})")
    group.add_argument(
        "--user", help=f"authenticate as USER (or ${ENV_USER}); password in ${ENV_PASSWORD}"
    )


def security_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Client keyword arguments from the flags and the environment."""
    out: dict[str, Any] = {}
    ca, cert, key = (getattr(args, n, None) for n in ("tls_ca", "tls_cert", "tls_key"))
    if ca or cert or key:
        out.update(tls_ca=ca, tls_cert=cert, tls_key=key)
        out["server_hostname"] = getattr(args, "tls_server_name", None)
    token = getattr(args, "token", None) or os.environ.get(ENV_TOKEN)
    user = getattr(args, "user", None) or os.environ.get(ENV_USER)
    if token:
        out["token"] = token
    elif user:
        out["user"] = user
        out["password"] = os.environ.get(ENV_PASSWORD, "")
    return out
