"""With authentication off, requests the gate lets through anyway skip its screen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jetsdk import Client
from jetsdk.acl import list_acls
from jetsdk.codec.frames import Api, Frame
from jetsdk.codec.messages import AckPolicy, ProduceMessage, ProduceRequest
from jetserver.security.gate import Security
from support.jet_server import running_server
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio


async def test_auth_off_skips_the_screen_but_not_the_gate_apis(
    nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Produce (and the admin requests around it) are not screened with authentication
    off: the screen would let them through (a coroutine per request saved); ListAcls,
    which the gate answers itself, still is, and is answered."""
    screened: list[int] = []
    real = Security.screen

    async def counting(self: Security, frame: Frame, *args: Any) -> Any:
        screened.append(frame.api)
        return await real(self, frame, *args)

    monkeypatch.setattr(Security, "screen", counting)
    async with (
        running_server(nats_server.url, tmp_path / "data") as jet,
        Client(jet.address) as c,
    ):
        await c.create_stream("open-s", "open.s")
        results = await c.produce(
            ProduceRequest("open-s", 0, AckPolicy.LEADER, 10_000, (ProduceMessage(b"a"),))
        )
        assert [r.error_code for r in results] == [0]
        assert Api.PRODUCE not in screened
        assert Api.LIST_ACLS not in screened
        assert isinstance(await list_acls(c), dict)
        assert Api.LIST_ACLS in screened
