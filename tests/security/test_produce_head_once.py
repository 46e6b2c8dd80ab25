"""With ACLs on, a Produce request's head is decoded once: for the grants and the append."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jetsdk import Client
from jetsdk.codec import messages, transcode
from jetsdk.codec.messages import AckPolicy, ProduceHead, ProduceMessage, ProduceRequest
from jetserver.broker import produce
from jetserver.broker.produce_one import OneProduce
from jetserver.protocol import handlers
from jetserver.security import gate
from security.auth_kit import auth_server, auth_settings, clients_as, tokens_for
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio


TOKENS = tokens_for("ops", "alice")
SETTINGS = auth_settings(TOKENS, ("ops:admin:*", "alice:publish:orders.*"))


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
    async with auth_server(nats_server.url, tmp_path / "data", SETTINGS) as addr:
        async with clients_as(addr, TOKENS, "ops", bootstrap="alice") as (ops,):
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
            # One message, ack LEADER: the one-step path (broker/produce_one.py), with the
            # head the grants were checked with; its answer as the general path's.
            served: list[bool] = []
            serve = OneProduce.serve

            async def spying(self: OneProduce, *args: Any) -> Any:
                out = await serve(self, *args)
                served.append(out is not None)
                return out

            monkeypatch.setattr(OneProduce, "serve", spying)
            one = ProduceRequest("orders.eu", 0, AckPolicy.LEADER, 10_000, (ProduceMessage(b"c"),))
            decoded.clear()
            results = await alice.produce(one)
            assert [(r.error_code, r.offset) for r in results] == [(0, 4)]
            assert (len(decoded), served) == (1, [True])
