"""Shared setup of the authorization tests: token identities and the server settings that
configure them, a server with auth on, and one client per identity once the configured grants
are in."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio

from jetsdk import Client
from jetsdk.acl import list_acls
from jetsdk.errors import PermissionDenied
from jetserver.security.passwords import hash_token
from support.jet_server import running_server

BOOTSTRAP_POLLS = 400
"""Polls (0.05 s apart, so about 20 s) for the configured grants to appear."""


def tokens_for(*names: str) -> dict[str, str]:
    """A token per identity name."""
    return {name: f"{name}-token-0123456789abcdef" for name in names}


def auth_settings(tokens: Mapping[str, str], acls: Iterable[str]) -> dict[str, object]:
    """Server settings: auth on, ``tokens`` (identity -> token) hashed, ``acls`` the grants
    the server proposes at start (``identity:ops:pattern``)."""
    return {
        "auth__enabled": True,
        "auth__tokens": tuple(f"{n}={hash_token(t)}" for n, t in tokens.items()),
        "auth__acls": tuple(acls),
    }


async def wait_bootstrap(client: Client, identity: str) -> None:
    """The configured grants are proposed in the background right after start: wait until
    ``identity``'s are listed (``client`` must be allowed to list ACLs)."""
    for _ in range(BOOTSTRAP_POLLS):
        with contextlib.suppress(PermissionDenied):
            if identity in await list_acls(client):
                return
        await anyio.sleep(0.05)
    raise AssertionError("bootstrap grants never appeared")


@asynccontextmanager
async def auth_server(
    nats_url: str, data: Path, settings: Mapping[str, object]
) -> AsyncIterator[str]:
    """A jet server with ``settings`` on ``nats_url``; yields its address."""
    async with running_server(nats_url, data, **settings) as jet:
        assert jet.address is not None
        yield jet.address


@asynccontextmanager
async def clients_as(
    address: str, tokens: Mapping[str, str], *names: str, bootstrap: str
) -> AsyncIterator[tuple[Client, ...]]:
    """One entered client per identity in ``names``, yielded once ``bootstrap``'s configured
    grants are in (checked with the first client, which must be allowed to list ACLs)."""
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Client(address, token=tokens[n])) for n in names]
        await wait_bootstrap(clients[0], bootstrap)
        yield tuple(clients)
