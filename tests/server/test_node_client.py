"""jet from a NATS client it did not write, in another language (issue 12): nats.js.

The npm package ``nats`` publishes a plain message with a repeated header, makes a plain
request, uses the header controls (``Jet-Ack``, ``Jet-Key``, ``Jet-Expected-Offset``) and
reads the JSON acks; the test then reads what the stream stored. Skips with the reason
where node or npm is missing.
"""

from __future__ import annotations

import anyio
import pytest

from jetserver.server import Server
from support.nats_server import NatsServer
from support.node_nats import run_node_script
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio


def run_node(url: str, subject: str) -> dict[str, dict[str, object]]:
    result: dict[str, dict[str, object]] = run_node_script("node_client.js", url, subject)
    return result


async def test_a_nodejs_client_stores_reads_acks_and_uses_header_controls(
    jet: Server, nats_server: NatsServer
) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="node", subject="node")
        out = await anyio.to_thread.run_sync(run_node, nats_server.url, "node")
        assert out["plain"] == {"stream": "node", "partition": 0, "offset": 1}
        assert out["keyed"] == {"stream": "node", "partition": 0, "offset": 2}
        assert out["expected"] == {"stream": "node", "partition": 0, "offset": 3}
        stale = out["stale"]["error"]
        assert isinstance(stale, dict)
        assert stale["name"] == "WRONG_EXPECTED_OFFSET"
        assert out["first"] == {"stream": "node", "partition": 0, "offset": 4}
        assert out["resend"] == {"stream": "node", "partition": 0, "offset": 4, "duplicate": True}
        records = await c.collect("node", 0, 5)
    first, plain, keyed, expected, once = records
    assert once.value == b"first"
    assert first.value == b"from node"
    assert [(n.lower(), v) for n, v in first.headers] == [("x-multi", b"a"), ("x-multi", b"b")]
    assert (plain.value, plain.reply != "") == (b"plain request", True)
    assert (keyed.key, keyed.value, keyed.headers) == (b"user-1", b"keyed", ())
    assert (expected.offset, expected.value) == (3, b"expected")
