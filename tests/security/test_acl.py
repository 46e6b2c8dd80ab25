"""Authorization on one server: per operation, ACL management, the groups log."""

from __future__ import annotations

from pathlib import Path

import anyio
import orjson
import pytest

from jetsdk import Client
from jetsdk.acl import list_acls, set_acl
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import AckPolicy, ProduceMessage, ProduceRequest, encode_json
from jetsdk.consumer.group_runtime import ensure_groups_stream
from jetsdk.errors import PermissionDenied
from jetsdk.group.records import GROUPS_STREAM
from jetsdk.partitioner import partition_for_key
from jetserver.cli.main import main as jet_main
from security.auth_kit import auth_server, auth_settings, clients_as, tokens_for
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

TOKENS = tokens_for("ops", "alice", "bob", "carol")
SETTINGS = auth_settings(
    TOKENS,
    (
        "ops:admin:*",
        "alice:publish:orders.*",
        "bob:fetch:orders.*",
        "carol:group:etl-*",
        "carol:fetch:orders.*",
    ),
)


def _produce(stream: str, value: bytes = b"v", key: bytes | None = None) -> ProduceRequest:
    return ProduceRequest(stream, 0, AckPolicy.LEADER, 10_000, (ProduceMessage(value, key),))


async def test_permissions_per_operation(nats_server: NatsServer, tmp_path: Path) -> None:
    async with (
        auth_server(nats_server.url, tmp_path / "data", SETTINGS) as addr,
        clients_as(addr, TOKENS, "ops", "alice", "bob", bootstrap="carol") as (ops, alice, bob),
    ):
        await ops.create_stream("orders.eu", "orders.eu")
        await ops.create_stream("payments", "payments")
        # admin: only ops creates and deletes.
        with pytest.raises(PermissionDenied):
            await alice.create_stream("orders.us", "orders.us")
        with pytest.raises(PermissionDenied):
            await bob.delete_stream("orders.eu")
        # publish: alice on orders.*, nobody else.
        assert (await alice.produce(_produce("orders.eu")))[0].error_code == 0
        with pytest.raises(PermissionDenied):
            await alice.produce(_produce("payments"))
        with pytest.raises(PermissionDenied):
            await bob.produce(_produce("orders.eu"))
        # fetch: bob on orders.*, not alice.
        header, _records = await bob.fetch("orders.eu", 0, 0, max_bytes=65536, max_wait=5.0)
        assert header.hw == 1
        with pytest.raises(PermissionDenied):
            await alice.fetch("orders.eu", 0, 0, max_bytes=65536, max_wait=0.0)
        with pytest.raises(PermissionDenied):
            await bob.fetch("payments", 0, 0, max_bytes=65536, max_wait=0.0)
        # Any permission on a stream lets one describe it and list its offsets.
        assert (await alice.describe_stream("orders.eu")).name == "orders.eu"
        with pytest.raises(PermissionDenied):
            await bob.describe_stream("payments")
        # ACL management needs admin on '*'.
        with pytest.raises(PermissionDenied):
            await set_acl(alice, "alice", [("admin", "*")])
        with pytest.raises(PermissionDenied):
            await list_acls(bob)
        # A change applies at once to open connections.
        await set_acl(ops, "bob", [("fetch", "orders.*"), ("publish", "payments")])
        assert (await bob.produce(_produce("payments")))[0].error_code == 0
        assert (await list_acls(ops))["bob"] == [
            ("fetch", "orders.*"),
            ("publish", "payments"),
        ]
        # An identity with no grants can still read the metadata, nothing else.
        await set_acl(ops, "bob", [])
        assert {s.name for s in (await bob.metadata(refresh=True)).streams.values()} >= {
            "orders.eu"
        }
        with pytest.raises(PermissionDenied):
            await bob.fetch("orders.eu", 0, 0, max_bytes=65536, max_wait=0.0)
        # Server-to-server APIs are refused to clients.
        body = encode_json({"stream": "orders.eu", "partition": 0, "leader_epoch": 0})
        with pytest.raises(PermissionDenied):
            await ops.request_any(Api.OFFSET_FOR_LEADER_EPOCH, body)
        # The CLI: `jet acl set` as ops works, as alice fails (exit code 1).
        cli = ["--servers", addr, "--token", TOKENS["ops"]]
        code = await anyio.to_thread.run_sync(
            jet_main, ["acl", "set", "dave", "fetch:orders.*", *cli]
        )
        assert code == 0
        assert (await list_acls(ops))["dave"] == [("fetch", "orders.*")]
        cli[-1] = TOKENS["alice"]
        assert await anyio.to_thread.run_sync(jet_main, ["acl", "clear", "dave", *cli]) == 1
    # The grants survive a restart (single server: metadata.json).
    async with (
        auth_server(nats_server.url, tmp_path / "data", SETTINGS) as addr,
        Client(addr, token=TOKENS["ops"]) as ops,
    ):
        assert (await list_acls(ops))["bob"] == []


def _group_record(group: str, member: str = "m-1") -> bytes:
    return orjson.dumps(
        {"v": 1, "type": "heartbeat", "group": group, "member": member, "generation": 0}
    )


async def test_groups_log_is_guarded(nats_server: NatsServer, tmp_path: Path) -> None:
    async with (
        auth_server(nats_server.url, tmp_path / "data", SETTINGS) as addr,
        clients_as(addr, TOKENS, "ops", "carol", "alice", bootstrap="carol") as (ops, carol, alice),
    ):
        # A member with a group permission may create the groups log (first use)...
        info = await ensure_groups_stream(carol)
        # ... and append records for its groups only, keyed by the group name.
        for group, allowed in (("etl-1", True), ("billing", False)):
            partition = partition_for_key(group.encode(), len(info.partitions))
            request = ProduceRequest(
                GROUPS_STREAM,
                partition,
                AckPolicy.LEADER,
                10_000,
                (ProduceMessage(_group_record(group), group.encode()),),
            )
            if allowed:
                assert (await carol.produce(request))[0].error_code == 0
            else:
                with pytest.raises(PermissionDenied):
                    await carol.produce(request)
        # The key and the record's group must agree (no writing into another group).
        sneaky = ProduceRequest(
            GROUPS_STREAM,
            partition_for_key(b"etl-1", len(info.partitions)),
            AckPolicy.LEADER,
            10_000,
            (ProduceMessage(_group_record("billing"), b"etl-1"),),
        )
        with pytest.raises(PermissionDenied):
            await carol.produce(sneaky)
        # Reading the groups log needs a group permission; '*' grants do not reach it.
        p = partition_for_key(b"etl-1", len(info.partitions))
        header, _ = await carol.fetch(GROUPS_STREAM, p, 0, max_bytes=65536, max_wait=5.0)
        assert header.hw == 1
        with pytest.raises(PermissionDenied):
            await alice.fetch(GROUPS_STREAM, p, 0, max_bytes=65536, max_wait=0.0)
        await set_acl(ops, "alice", [("fetch", "*"), ("publish", "*")])
        with pytest.raises(PermissionDenied):
            await alice.fetch(GROUPS_STREAM, p, 0, max_bytes=65536, max_wait=0.0)
        with pytest.raises(PermissionDenied):
            await alice.produce(
                ProduceRequest(
                    GROUPS_STREAM,
                    p,
                    AckPolicy.LEADER,
                    10_000,
                    (ProduceMessage(_group_record("etl-1"), b"etl-1"),),
                )
            )


async def test_consumer_group_needs_group_grant(nats_server: NatsServer, tmp_path: Path) -> None:
    """The SDK's consumer groups end to end: a member joins, consumes and commits in a group
    it has rights on; joining another group raises PermissionDenied."""
    from jetsdk.consumer import Consumer
    from jetsdk.group.member import MemberConfig

    config = MemberConfig(session_timeout=2.5, heartbeat_interval=0.25, release_timeout=4.0)
    async with (
        auth_server(nats_server.url, tmp_path / "data", SETTINGS) as addr,
        clients_as(addr, TOKENS, "ops", "alice", "carol", bootstrap="carol") as (ops, alice, carol),
    ):
        await ops.create_stream("orders.g", "orders.g")
        for i in range(5):
            assert (await alice.produce(_produce("orders.g", b"%d" % i)))[0].error_code == 0
        async with Consumer(
            carol, group="etl-a", streams=["orders.g"], group_config=config
        ) as consumer:
            got: list[bytes] = []
            with anyio.fail_after(30):
                while len(got) < 5:
                    got += [m.value for m in await consumer.fetch(timeout=5)]
            assert got == [b"%d" % i for i in range(5)]
            await consumer.commit()
            assert consumer.committed(0) is not None

        async def join_billing() -> None:
            async with Consumer(
                carol, group="billing", streams=["orders.g"], group_config=config
            ) as other:
                with anyio.fail_after(30):
                    await other.fetch(timeout=5)

        with pytest.raises(PermissionDenied):
            await join_billing()
