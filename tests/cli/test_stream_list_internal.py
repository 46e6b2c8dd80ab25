"""Internal streams (the group log ``__groups``, share logs) stay out of listings unless
asked for, in the SDK and in ``jet stream list``."""

from __future__ import annotations

import uuid

import anyio
import orjson

from jetsdk import Client
from jetsdk.consumer.group_admin import commit_offsets
from jetsdk.group.records import GROUPS_STREAM
from jetsdk.group.stream_partition import StreamPartition
from support.jet_cli import jet
from support.jet_dev import JetDev


def test_listings_hide_internal_streams_unless_asked(jet_dev: JetDev) -> None:
    stream = f"li-{uuid.uuid4().hex[:6]}"

    async def setup() -> tuple[list[str], list[str]]:
        async with Client(jet_dev.servers) as client:
            await client.create_stream(stream, stream)
            # A group commit creates the internal group log.
            await commit_offsets(client, f"g-{stream}", {StreamPartition(stream, 0): 0})
            shown = [s.name for s in await client.list_streams()]
            every = [s.name for s in await client.list_streams(include_internal=True)]
            return shown, every

    shown, every = anyio.run(setup)
    assert stream in shown
    assert GROUPS_STREAM not in shown
    assert GROUPS_STREAM in every
    assert stream in every

    plain = jet(jet_dev, "stream", "list", "--json")
    assert plain.returncode == 0, plain.stderr
    names = [s["name"] for s in orjson.loads(plain.stdout)]
    assert stream in names
    assert GROUPS_STREAM not in names
    table = jet(jet_dev, "stream", "list")
    assert stream in table.stdout
    assert GROUPS_STREAM not in table.stdout
    everything = jet(jet_dev, "stream", "list", "--all", "--json")
    assert GROUPS_STREAM in [s["name"] for s in orjson.loads(everything.stdout)]
