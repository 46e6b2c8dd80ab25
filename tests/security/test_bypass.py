"""Issue 31 cases 4-6: authorization that cannot be bypassed (spec/security.md).

Each test runs a real server with auth on and a real nats-server; the attackers are real
identities (tokens) and a raw NATS client.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import nats
import orjson
import pytest

from jetsdk import Client
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import AckPolicy, ProduceMessage, ProduceRequest, encode_json
from jetsdk.consumer.group_admin import commit_offsets, read_group
from jetsdk.consumer.group_runtime import ensure_groups_stream
from jetsdk.errors import InvalidArgument, JetError, PermissionDenied
from jetsdk.group.records import GROUPS_STREAM
from jetsdk.group.stream_partition import StreamPartition
from jetsdk.partitioner import partition_for_key
from jetserver.testing import nats_flushed
from security.auth_kit import auth_server, auth_settings, clients_as, tokens_for
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

TOKENS = tokens_for("ops", "alice", "mallory", "vic")
ACLS = (
    "ops:admin+publish+fetch:*",
    "alice:publish:wide",
    "mallory:group:attackers",
    "vic:group:victims",
    "vic:fetch:orders",
)
SETTINGS = auth_settings(TOKENS, ACLS)


def _produce(
    stream: str, partition: int, value: bytes, key: bytes | None = None, subject: str = ""
) -> ProduceRequest:
    message = ProduceMessage(value, key, subject=subject)
    return ProduceRequest(stream, partition, AckPolicy.ALL, 10_000, (message,))


def _groups_subject(partition: int) -> str:
    return "_jet.groups" if partition == 0 else f"_jet.groups.{partition}"


async def _hw(client: Client, stream: str, partition: int) -> int:
    header, _records = await client.fetch(stream, partition, 0, max_bytes=1 << 20, max_wait=0.0)
    return header.hw


async def _barrier(nc: nats.NATS, ops: Client, stream: str) -> None:
    """Publish on ``stream``'s subject after everything ``nc`` sent before and wait until the
    server stored it: what ``nc`` published before has reached the server's ingest."""
    before = await _hw(ops, stream, 0)
    await nc.publish(stream, b"barrier")
    await nats_flushed(nc)
    with anyio.fail_after(10):
        header, _records = await ops.fetch(stream, 0, before, max_bytes=1 << 20, max_wait=10.0)
    assert header.hw > before


async def test_other_groups_records_do_not_stop_a_group(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Case 4: a plain NATS publish of ``{"v":99}`` on the group log's subject, and a v99
    record from ``group:attackers`` keyed to the victims' partition, leave group ``victims``
    readable; neither is stored."""
    async with auth_server(nats_server.url, tmp_path / "data", SETTINGS) as addr:
        nc = await nats.connect(nats_server.url)
        try:
            async with clients_as(addr, TOKENS, "ops", "mallory", "vic", bootstrap="vic") as (
                ops,
                mallory,
                vic,
            ):
                await ops.create_stream("orders", "orders")
                await ops.create_stream("barrier", "barrier")
                info = await ensure_groups_stream(vic)
                p = partition_for_key(b"victims", len(info.partitions))
                await commit_offsets(vic, "victims", {StreamPartition("orders", 0): 7})
                hw = await _hw(vic, GROUPS_STREAM, p)
                # A plain NATS client writes into the group log's partition subject.
                await nc.publish(_groups_subject(p), orjson.dumps({"v": 99}))
                await _barrier(nc, ops, "barrier")
                # An identity with group:attackers writes a v99 record of its own group into
                # the victims' partition.
                bad = orjson.dumps(
                    {"v": 99, "type": "heartbeat", "group": "attackers", "member": "m"}
                )
                with pytest.raises((PermissionDenied, InvalidArgument)):
                    await mallory.produce(_produce(GROUPS_STREAM, p, bad, b"attackers"))
                assert await _hw(vic, GROUPS_STREAM, p) == hw
                state = await read_group(vic, "victims")
                assert state is not None
                assert (entry := state.committed(StreamPartition("orders", 0))) is not None
                assert entry.position.offset == 7
        finally:
            await nc.close()


async def test_group_grant_cannot_create_a_capturing_internal_stream(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Case 5: ``group:attackers`` creating ``__groups`` on subject ``secret`` is refused; the
    group log created as the server defines it captures nothing published to ``secret``."""
    async with (
        auth_server(nats_server.url, tmp_path / "data", SETTINGS) as addr,
        clients_as(addr, TOKENS, "ops", "mallory", bootstrap="vic") as (ops, mallory),
    ):
        await ops.create_stream("secret", "secret")
        body = {"name": GROUPS_STREAM, "subject": "secret", "internal": True}
        with pytest.raises(InvalidArgument) as refused:
            await mallory.request_any(Api.CREATE_STREAM, encode_json(body))
        assert refused.value.details.get("field") == "subject"
        # Other internal names are the server's too.
        for name, subject in (("__offsets", "_jet.offsets"), ("__share.x", "secret")):
            with pytest.raises((InvalidArgument, PermissionDenied)):
                await ops.request_any(
                    Api.CREATE_STREAM,
                    encode_json({"name": name, "subject": subject, "internal": True}),
                )
        info = await ensure_groups_stream(mallory)
        assert info.subject == "_jet.groups"
        await ops.produce(_produce("secret", 0, b"payroll"))
        for q in range(len(info.partitions)):
            assert await _hw(mallory, GROUPS_STREAM, q) == 0


async def test_publish_grant_reaches_only_granted_streams(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Case 6: alice (publish on ``wide``, subject ``wide.>``) producing with message subject
    ``wide.secret`` would also be stored in ``narrow``: refused, naming ``narrow``."""
    async with (
        auth_server(nats_server.url, tmp_path / "data", SETTINGS) as addr,
        clients_as(addr, TOKENS, "ops", "alice", bootstrap="vic") as (ops, alice),
    ):
        await ops.create_stream("wide", "wide.>")
        await ops.create_stream("narrow", "wide.secret")
        with pytest.raises(PermissionDenied) as refused:
            await alice.produce(_produce("wide", 0, b"x", subject="wide.secret"))
        assert "narrow" in str(refused.value)
        ok = await alice.produce(_produce("wide", 0, b"y", subject="wide.public"))
        assert ok[0].error_code == 0
        # Stored once in wide; narrow holds nothing (an ops write there shows it works).
        assert await _hw(ops, "wide", 0) == 1
        assert await _hw(ops, "narrow", 0) == 0


async def test_jet_subjects_are_reserved_for_user_streams(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A user stream may not listen on the server's ``_jet.`` subjects."""
    async with (
        auth_server(nats_server.url, tmp_path / "data", SETTINGS) as addr,
        clients_as(addr, TOKENS, "ops", bootstrap="vic") as (ops,),
    ):
        for subject in ("_jet.groups", "_jet.>", "_jet.share.x"):
            with pytest.raises(InvalidArgument) as refused:
                await ops.create_stream("spy", subject)
            assert refused.value.details.get("field") == "subject"
        with contextlib.suppress(JetError):
            await ops.delete_stream("spy")


async def test_share_group_runs_on_a_group_grant(nats_server: NatsServer, tmp_path: Path) -> None:
    """A share group works with ``group`` on its name (its log ``__share.<g>``: created, read
    and appended through that grant); another group's identity cannot join it."""
    from jetsdk.consumer.share_consumer import ShareConsumer, read_share_group

    tokens = {**TOKENS, **tokens_for("w")}
    settings = auth_settings(
        tokens, (*ACLS, "w:group:w-*", "w:fetch:jobs", "w:admin+publish+fetch:w-*")
    )
    async with (
        auth_server(nats_server.url, tmp_path / "data", settings) as addr,
        clients_as(addr, tokens, "ops", "w", "mallory", bootstrap="vic") as (ops, w, mallory),
    ):
        await ops.create_stream("jobs", "jobs")
        for i in range(5):
            await ops.produce(_produce("jobs", 0, b"%d" % i))
        got: list[bytes] = []
        async with ShareConsumer(w, "jobs", group="w-1", ack_deadline=10.0) as consumer:
            with anyio.fail_after(30):
                while len(got) < 5:
                    msg = await consumer.next(timeout=5)
                    if msg is not None:
                        got.append(msg.value)
                        await msg.ack()
            await consumer.flush()
        assert sorted(got) == [b"%d" % i for i in range(5)]
        state = await read_share_group(w, "w-1")
        assert state is not None
        assert state.partition("jobs", 0).spso == 5
        with pytest.raises(PermissionDenied):
            async with ShareConsumer(mallory, "jobs", group="w-1") as intruder:
                await intruder.next(timeout=1)
