"""With ACLs on, a Produce request's head is decoded once: for the grants and the append."""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import pytest

from jetsdk import Client
from jetsdk.acl import list_acls
from jetsdk.codec import messages, transcode
from jetsdk.codec.messages import AckPolicy, ProduceHead, ProduceMessage, ProduceRequest
from jetsdk.errors import PermissionDenied
from jetserver.broker import produce
from jetserver.protocol import handlers
from jetserver.security import gate
from jetserver.security.passwords import hash_token
from support.jet_server import running_server
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio


async def _wait_bootstrap(client: Client) -> None:
    """The configured grants are proposed in the background right after start."""
    for _ in range(400):
        with contextlib.suppress(PermissionDenied):
            if "alice" in await list_acls(client):
                return
        await anyio.sleep(0.05)
    raise AssertionError("bootstrap grants never appeared")


TOKENS = {"ops": "ops-token-0123456789abcdef", "alice": "alice-token-0123456789abcdef"}
SETTINGS: dict[str, object] = {
    "auth__enabled": True,
    "auth__tokens": tuple(f"{n}={hash_token(t)}" for n, t in TOKENS.items()),
    "auth__acls": ("ops:admin:*", "alice:publish:orders.*"),
}


async def test_a_produce_head_is_decoded_once_with_acls_on(
    nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[bytes] = []
    real = messages.decode_produce_head

    def counting(body: bytes) -> ProduceHead:
        decoded.append(body)
        return real(body)

    for module in (messages, transcode, produce, handlers, gate):
        if hasattr(module, "decode_produce_head"):
            monkeypatch.setattr(module, "decode_produce_head", counting)
    async with running_server(nats_server.url, tmp_path / "data", **SETTINGS) as jet:
        addr = jet.address
        assert addr is not None
        async with Client(addr, token=TOKENS["ops"]) as ops:
            await _wait_bootstrap(ops)
            await ops.create_stream("orders.eu", "orders.eu")
        async with Client(addr, token=TOKENS["alice"]) as alice:
            for policy in (AckPolicy.LEADER, AckPolicy.ALL):
                request = ProduceRequest(
                    "orders.eu", 0, policy, 10_000, (ProduceMessage(b"a"), ProduceMessage(b"b"))
                )
                decoded.clear()
                results = await alice.produce(request)
                assert [r.error_code for r in results] == [0, 0]
                assert len(decoded) == 1, decoded
