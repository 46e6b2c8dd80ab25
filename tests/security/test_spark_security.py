"""jetspark's connections with TLS and a token, without Spark: the Bridge the source and
sinks share is built from parsed options against a real server with TLS and auth on."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import anyio
import pytest

from jetsdk import Client
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.codec.record import iter_records
from jetsdk.errors import Unauthenticated
from jetserver.security.passwords import hash_token
from jetspark._bridge import Bridge
from jetspark.options import security_options, sink_options
from security.certs import CertAuthority
from support.jet_server import running_server
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio
TOKEN = "spark-token-0123456789-abcdefghijkl"


async def _produce_and_fetch(client: Client) -> list[bytes]:
    await client.create_stream("spark-sec", "spark.sec")
    request = ProduceRequest(
        "spark-sec", 0, AckPolicy.ALL, 10_000, (ProduceMessage(b"a"), ProduceMessage(b"b"))
    )
    assert [r.error_code for r in await client.produce(request)] == [0, 0]
    _header, records = await client.fetch("spark-sec", 0, 0, max_bytes=1 << 20, max_wait=5.0)
    return [bytes(r.value) for r in iter_records(records)]


async def test_bridge_with_tls_and_token(
    nats_server: NatsServer, tmp_path: Path, ca: CertAuthority
) -> None:
    server = ca.issue("jet-server")
    settings: dict[str, object] = {
        "tls__cert": server.cert,
        "tls__key": server.key,
        "auth__enabled": True,
        "auth__tokens": (f"bot={hash_token(TOKEN)}",),
        "auth__acls": ("bot:admin:*", "bot:publish:*", "bot:fetch:*"),
    }
    async with running_server(nats_server.url, tmp_path / "data", **settings) as jet:
        raw = {"servers": jet.address, "tlsCa": str(ca.ca_path), "token": TOKEN}
        opts = sink_options(raw)
        # Bridge blocks its caller until connected: build and use it from a worker thread
        # so this loop keeps serving the server.
        bridge = await anyio.to_thread.run_sync(
            partial(Bridge, opts.servers, security=opts.security)
        )
        try:
            assert bridge.client.identity == "bot"
            values = await anyio.to_thread.run_sync(bridge.call, _produce_and_fetch, bridge.client)
            assert values == [b"a", b"b"]
        finally:
            await anyio.to_thread.run_sync(bridge.close)
        wrong = security_options({**raw, "token": "not-the-token"})
        with pytest.raises(Unauthenticated) as info:
            await anyio.to_thread.run_sync(partial(Bridge, opts.servers, security=wrong))
        assert "not-the-token" not in str(info.value)
