"""A cluster server that has not reconciled yet does not claim that a stream is missing.

After a restart of a whole cluster, a member's metadata is applied only once a Raft leader
commits; until then "stream not found" would be a lie that clients act on (a producer fails
its sends, a consumer stops). Such a server answers UNAVAILABLE (retriable) instead
(spec/cluster.md, "Bootstrap and start-up"). The Dispatcher is driven directly with a
stand-in for the cluster node that only has what the dispatcher reads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import anyio
import orjson
import pytest

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api, Frame, FrameDecoder
from jetsdk.codec.messages import decode_error
from jetserver.protocol.handlers import Dispatcher
from jetserver.raft.errors import RaftTimeout
from jetserver.server import Server

pytestmark = pytest.mark.anyio


class _Raft:
    """Only what the dispatcher reads; ``wait_applied`` runs ``on_apply`` once, if set (an
    entry arriving), and otherwise times out (nothing more to apply)."""

    def __init__(self) -> None:
        self.index = 0
        self.leader_id = None
        self.state = SimpleNamespace(servers={})
        self.on_apply: Callable[[], Awaitable[object]] | None = None

    async def wait_applied(self, index: int, *, timeout: float | None = None) -> None:  # noqa: ASYNC109 - same signature as MetadataRaft
        if self.on_apply is None:
            raise RaftTimeout("nothing more to apply")
        apply, self.on_apply = self.on_apply, None
        await apply()
        self.index = index


def _node() -> Any:
    # liveness: every server answers (the Metadata and DescribeStream answers say so).
    liveness = SimpleNamespace(is_down=lambda _server_id: False)
    return SimpleNamespace(reconciled=anyio.Event(), raft=_Raft(), liveness=liveness)


async def _ask(dispatcher: Dispatcher, api: Api, body: dict[str, Any]) -> tuple[bool, Any]:
    reply = await dispatcher.handle(Frame(api, 0, 1, orjson.dumps(body)))
    decoder = FrameDecoder()
    decoder.feed(reply.data)
    frame = decoder.next_frame()
    assert frame is not None
    return frame.is_error, frame.body


async def test_unknown_stream_is_unavailable_until_reconciled(jet: Server) -> None:
    node = _node()
    dispatcher = Dispatcher(jet.config, jet.streams, jet._dispatcher.produce, cluster=node)
    for api, body in [
        (Api.DESCRIBE_STREAM, {"name": "nope"}),
        (Api.LIST_OFFSETS, {"stream": "nope", "partition": 0}),
        (Api.METADATA, {"streams": ["nope"]}),
        # The SDK asks for the whole metadata and reads "no such stream" from an answer
        # without it: a starting server's whole answer would be just as wrong.
        (Api.METADATA, {"streams": None}),
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


async def test_a_stream_created_elsewhere_a_moment_ago_is_found_after_catching_up(
    jet: Server,
) -> None:
    """Its Raft entry arrives while the request waits (STALE_METADATA_GRACE_S)."""
    node = _node()
    node.reconciled.set()
    dispatcher = Dispatcher(jet.config, jet.streams, jet._dispatcher.produce, cluster=node)
    node.raft.on_apply = lambda: jet.local_streams.create({"name": "late", "subject": "late"})
    error, payload = await _ask(dispatcher, Api.DESCRIBE_STREAM, {"name": "late"})
    assert not error
    assert orjson.loads(payload)["name"] == "late"
    node.raft.on_apply = lambda: jet.local_streams.create({"name": "later", "subject": "later"})
    error, payload = await _ask(dispatcher, Api.METADATA, {"streams": ["later"]})
    assert not error
    assert [s["name"] for s in orjson.loads(payload)["streams"]] == ["later"]
