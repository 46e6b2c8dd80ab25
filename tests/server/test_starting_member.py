"""A cluster server that has not reconciled yet does not claim that a stream is missing.

After a restart of a whole cluster, a member's metadata is applied only once a Raft leader
commits; until then "stream not found" would be a lie that clients act on (a producer fails
its sends, a consumer stops). Such a server answers UNAVAILABLE (retriable) instead
(spec/cluster.md, "Bootstrap and start-up"). The Dispatcher is driven directly with a
stand-in for the cluster node that only has what the dispatcher reads.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio
import orjson
import pytest

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api, Frame, FrameDecoder
from jetsdk.codec.messages import decode_error
from jetserver.protocol.handlers import Dispatcher
from jetserver.server import Server

pytestmark = pytest.mark.anyio


def _node() -> Any:
    return SimpleNamespace(
        reconciled=anyio.Event(),
        raft=SimpleNamespace(state=SimpleNamespace(servers={}), leader_id=None),
    )


async def _ask(dispatcher: Dispatcher, api: Api, body: dict[str, Any]) -> tuple[bool, Any]:
    reply = await dispatcher.handle(Frame(api, 0, 1, orjson.dumps(body)))
    decoder = FrameDecoder()
    decoder.feed(reply.data)
    frame = decoder.next_frame()
    assert frame is not None
    return frame.is_error, frame.body


async def test_unknown_stream_is_unavailable_until_reconciled(jet: Server) -> None:
    assert jet._dispatcher is not None
    node = _node()
    dispatcher = Dispatcher(jet.config, jet.streams, jet._dispatcher.produce, cluster=node)
    for api, body in [
        (Api.DESCRIBE_STREAM, {"name": "nope"}),
        (Api.LIST_OFFSETS, {"stream": "nope", "partition": 0}),
        (Api.METADATA, {"streams": ["nope"]}),
    ]:
        error, payload = await _ask(dispatcher, api, body)
        assert error, api
        assert decode_error(payload).code == ErrorCode.UNAVAILABLE, api
    node.reconciled.set()
    error, payload = await _ask(dispatcher, Api.DESCRIBE_STREAM, {"name": "nope"})
    assert error
    assert decode_error(payload).code == ErrorCode.STREAM_NOT_FOUND
    error, payload = await _ask(dispatcher, Api.METADATA, {"streams": ["nope"]})
    assert not error
    assert orjson.loads(payload)["streams"] == []
