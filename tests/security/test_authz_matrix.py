"""The authorization matrix of spec/security.md §8, black box: each grant, each API, user
and internal streams, and the plain NATS side doors, against one real server (auth on) and a real
nats-server. Every cell is run and compared; the test fails listing every cell that differs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import nats
import orjson
import pytest

from jetsdk import Client
from jetsdk.acl import list_acls, set_acl
from jetsdk.codec.fetch_messages import FetchRequest, encode_fetch_request
from jetsdk.codec.fetch_stream import FetchStreamRequest, encode_fetch_stream_request
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import AckPolicy, ProduceMessage, ProduceRequest, encode_json
from jetsdk.consumer.group_runtime import ensure_groups_stream
from jetsdk.consumer.share_consumer import ensure_share_stream
from jetsdk.errors import InvalidArgument, JetError, PermissionDenied
from jetsdk.group.records import GROUPS_STREAM, Heartbeat, encode_record
from jetsdk.partitioner import partition_for_key
from jetsdk.share.records import Claim, encode_share_record
from jetserver.security.passwords import hash_token
from jetserver.testing import nats_flushed
from support.jet_server import running_server
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

OK, DENIED, INVALID = "ok", "denied", "invalid"
GRANTS: dict[str, list[tuple[str, str]]] = {
    "nobody": [],
    "pub": [("publish", "data.*")],
    "fetcher": [("fetch", "data.*")],
    "admin": [("admin", "data.*")],
    "member": [("group", "g-*")],
    "logwriter": [("publish", "__groups")],
    "root": [("admin", "*"), ("publish", "*"), ("fetch", "*")],
}
IDENTITIES = tuple(GRANTS)
TOKENS = {name: f"{name}-token-0123456789abcdef" for name in (*IDENTITIES, "ops")}
SETTINGS: dict[str, object] = {
    "auth__enabled": True,
    "auth__tokens": tuple(f"{n}={hash_token(t)}" for n, t in TOKENS.items()),
    "auth__acls": ("ops:admin+publish+fetch:*", "ops:admin+publish+fetch+group:__*"),
}
SHARE = "__share.g-1"


def _row(**cells: str) -> dict[str, str]:
    """Expected outcome per identity (unnamed ones: denied)."""
    return {i: cells.get(i, DENIED) for i in IDENTITIES}


def _produce(
    stream: str, value: bytes, *, partition: int = 0, key: bytes | None = None, subject: str = ""
) -> ProduceRequest:
    message = ProduceMessage(value, key, subject=subject)
    return ProduceRequest(stream, partition, AckPolicy.ALL, 10_000, (message,))


def _heartbeat(group: str, **extra: object) -> bytes:
    return (
        encode_record(Heartbeat(group=group, member="m-1", generation=0))
        if not extra
        else (orjson.dumps({"v": 1, "type": "heartbeat", "group": group, "member": "m-1", **extra}))
    )


def _claim(group: str) -> bytes:
    return encode_share_record(Claim(group, "s-1", "data.a", 0, None, 1, 30_000, 5, size=1))


Op = Callable[[Client, str], Awaitable[object]]


async def _outcome(op: Op, client: Client, identity: str) -> str:
    try:
        await op(client, identity)
    except PermissionDenied:
        return DENIED
    except InvalidArgument:
        return INVALID
    except JetError as exc:
        return f"error {type(exc).__name__}: {exc}"
    return OK


def _matrix(groups_partitions: int) -> list[tuple[str, Op, dict[str, str]]]:
    """(what, operation, expected outcome per identity)."""
    p1 = partition_for_key(b"g-1", groups_partitions)
    wrong = (p1 + 1) % groups_partitions

    def produce(req: ProduceRequest) -> Op:
        async def run(c: Client, _i: str) -> object:
            results = await c.produce(req)
            assert results[0].error_code == 0, results
            return results

        return run

    def request(api: Api, body: dict[str, object]) -> Op:
        return lambda c, _i: c.request_any(api, encode_json(body))

    def fetch(stream: str, partition: int = 0, replica_id: int = -1) -> Op:
        req = FetchRequest(stream, partition, 0, 1 << 16, 0, replica_id=replica_id)
        return lambda c, _i: c.request_any(Api.FETCH, encode_fetch_request(req))

    def fetch_stream(stream: str, partition: int = 0) -> Op:
        # No wait, one answer: the stream's first answer is its last (a plain request).
        req = FetchStreamRequest(stream, partition, 0, 1 << 16, 0, 1)
        return lambda c, _i: c.request_any(Api.FETCH_STREAM, encode_fetch_stream_request(req))

    groups_body = {
        "name": GROUPS_STREAM,
        "subject": "_jet.groups",
        "partitions": groups_partitions,
        "internal": True,
    }
    share_body = {"name": SHARE, "subject": "_jet.share.g-1", "internal": True}
    return [
        # Metadata and Hello: every authenticated identity.
        ("Metadata", lambda c, _i: c.metadata(refresh=True), _row(**dict.fromkeys(IDENTITIES, OK))),
        # CreateStream / DeleteStream: admin on the name; internal ones by group grants only.
        (
            "CreateStream data.c-<identity>",
            lambda c, i: c.create_stream(f"data.c-{i}", f"data.c-{i}"),
            _row(admin=OK, root=OK),
        ),
        (
            "CreateStream data.j (subject _jet.x)",
            lambda c, _i: c.create_stream("data.j", "_jet.x"),
            _row(admin=INVALID, root=INVALID),
        ),
        (
            "CreateStream __groups (server's settings)",
            request(Api.CREATE_STREAM, groups_body),
            _row(member=OK),
        ),
        (
            "CreateStream __groups subject secret",
            request(Api.CREATE_STREAM, {**groups_body, "subject": "secret"}),
            _row(member=INVALID),
        ),
        (
            "CreateStream __groups retention 1 s",
            request(Api.CREATE_STREAM, {**groups_body, "retention_max_age_s": 1}),
            _row(member=INVALID),
        ),
        ("CreateStream __share.g-1", request(Api.CREATE_STREAM, share_body), _row(member=OK)),
        (
            "CreateStream __share.h",
            request(
                Api.CREATE_STREAM, {**share_body, "name": "__share.h", "subject": "_jet.share.h"}
            ),
            _row(),
        ),
        (
            "CreateStream __offsets",
            request(
                Api.CREATE_STREAM, {"name": "__offsets", "subject": "_jet.o", "internal": True}
            ),
            _row(),
        ),
        (
            "DeleteStream data.d-<identity>",
            lambda c, i: c.delete_stream(f"data.d-{i}"),
            _row(admin=OK, root=OK),
        ),
        ("DeleteStream __groups", request(Api.DELETE_STREAM, {"name": GROUPS_STREAM}), _row()),
        # UpdateStream / PurgeStream: admin on the name (internal ones: a `__` admin only).
        (
            "UpdateStream data.a",
            lambda c, _i: c.update_stream("data.a", retention_max_messages=1_000_000),
            _row(admin=OK, root=OK),
        ),
        (
            "UpdateStream __groups",
            request(
                Api.UPDATE_STREAM,
                {"name": GROUPS_STREAM, "settings": {"retention_max_messages": 5}},
            ),
            _row(),
        ),
        (
            "PurgeStream data.a (before 0: keeps every record)",
            lambda c, _i: c.purge_stream("data.a", 0, before=0),
            _row(admin=OK, root=OK),
        ),
        (
            "PurgeStream __groups",
            request(Api.PURGE_STREAM, {"stream": GROUPS_STREAM, "partition": 0, "before": 0}),
            _row(),
        ),
        # Produce: publish on the stream and on every stream its subject reaches.
        ("Produce data.a", produce(_produce("data.a", b"x")), _row(pub=OK, root=OK)),
        ("Produce other", produce(_produce("other", b"x")), _row(root=OK)),
        (
            "Produce data.w subject w.y",
            produce(_produce("data.w", b"x", subject="w.y")),
            _row(pub=OK, root=OK),
        ),
        (
            "Produce data.w subject w.x (also stored in other)",
            produce(_produce("data.w", b"x", subject="w.x")),
            _row(root=OK),
        ),
        # Produce into the internal streams.
        (
            "Produce __groups own group's record",
            produce(_produce(GROUPS_STREAM, _heartbeat("g-1"), partition=p1, key=b"g-1")),
            _row(member=OK, logwriter=OK),
        ),
        (
            "Produce __groups another group's record",
            produce(_produce(GROUPS_STREAM, _heartbeat("h"), partition=p1, key=b"h")),
            _row(logwriter=OK),
        ),
        (
            "Produce __groups own record keyed to another group",
            produce(_produce(GROUPS_STREAM, _heartbeat("h"), partition=p1, key=b"g-1")),
            _row(logwriter=OK),
        ),
        (
            "Produce __groups own group, v99",
            produce(_produce(GROUPS_STREAM, _heartbeat("g-1", v=99), partition=p1, key=b"g-1")),
            _row(member=INVALID, logwriter=OK),
        ),
        (
            "Produce __groups own group, another partition",
            produce(_produce(GROUPS_STREAM, _heartbeat("g-1"), partition=wrong, key=b"g-1")),
            _row(member=INVALID, logwriter=OK),
        ),
        (
            "Produce __groups invalid record",
            produce(_produce(GROUPS_STREAM, b'{"v":1,"group":"g-1"}', partition=p1, key=b"g-1")),
            _row(member=INVALID, logwriter=OK),
        ),
        (
            "Produce __share.g-1 own record",
            produce(_produce(SHARE, _claim("g-1"))),
            _row(member=OK),
        ),
        (
            "Produce __share.g-1 record of g-2",
            produce(_produce(SHARE, _claim("g-2"))),
            _row(member=INVALID),
        ),
        ("Produce __share.h", produce(_produce("__share.h", _claim("h"))), _row()),
        # Fetch, DescribeStream, ListOffsets.
        ("Fetch data.a", fetch("data.a"), _row(fetcher=OK, root=OK)),
        ("Fetch other", fetch("other"), _row(root=OK)),
        ("Fetch __groups", fetch(GROUPS_STREAM, p1), _row(member=OK)),
        ("Fetch __share.g-1", fetch(SHARE), _row(member=OK)),
        ("Fetch __share.h", fetch("__share.h"), _row()),
        ("Fetch data.a as a replica", fetch("data.a", replica_id=0), _row()),
        ("FetchStream data.a", fetch_stream("data.a"), _row(fetcher=OK, root=OK)),
        ("FetchStream other", fetch_stream("other"), _row(root=OK)),
        ("FetchStream __groups", fetch_stream(GROUPS_STREAM, p1), _row(member=OK)),
        ("FetchStream __share.h", fetch_stream("__share.h"), _row()),
        (
            "DescribeStream data.a",
            request(Api.DESCRIBE_STREAM, {"name": "data.a"}),
            _row(pub=OK, fetcher=OK, admin=OK, root=OK),
        ),
        (
            "DescribeStream __groups",
            request(Api.DESCRIBE_STREAM, {"name": GROUPS_STREAM}),
            _row(member=OK, logwriter=OK),
        ),
        (
            "DescribeStream __share.g-1",
            request(Api.DESCRIBE_STREAM, {"name": SHARE}),
            _row(member=OK),
        ),
        (
            "ListOffsets data.a",
            request(Api.LIST_OFFSETS, {"stream": "data.a", "partition": 0, "position": "latest"}),
            _row(pub=OK, fetcher=OK, admin=OK, root=OK),
        ),
        (
            "ListOffsets __groups",
            request(
                Api.LIST_OFFSETS, {"stream": GROUPS_STREAM, "partition": p1, "position": "latest"}
            ),
            _row(member=OK, logwriter=OK),
        ),
        # ACL management and server-to-server APIs.
        ("ListAcls", lambda c, _i: list_acls(c), _row(root=OK)),
        ("SetAcl", lambda c, _i: set_acl(c, "someone", []), _row(root=OK)),
        (
            "OffsetForLeaderEpoch",
            request(
                Api.OFFSET_FOR_LEADER_EPOCH, {"stream": "data.a", "partition": 0, "leader_epoch": 0}
            ),
            _row(),
        ),
    ]


async def _hw(client: Client, stream: str, partition: int) -> int:
    header, _records = await client.fetch(stream, partition, 0, max_bytes=1 << 16, max_wait=0.0)
    return header.hw


async def test_authorization_matrix(nats_server: NatsServer, tmp_path: Path) -> None:
    async with running_server(nats_server.url, tmp_path / "data", **SETTINGS) as jet:
        addr = jet.address
        assert addr is not None
        async with contextlib.AsyncExitStack() as stack:
            ops = await stack.enter_async_context(Client(addr, token=TOKENS["ops"]))
            for _ in range(400):  # the configured grants are proposed just after start
                if "ops" in await _acls_or_empty(ops):
                    break
                await anyio.sleep(0.05)
            for identity, grants in GRANTS.items():
                await set_acl(ops, identity, grants)
            clients = {
                i: await stack.enter_async_context(Client(addr, token=TOKENS[i]))
                for i in IDENTITIES
            }
            for name, subject in (("data.a", "data.a"), ("data.w", "w.>"), ("other", "w.x")):
                await ops.create_stream(name, subject)
            for i in IDENTITIES:
                await ops.create_stream(f"data.d-{i}", f"data.d-{i}")
            info = await ensure_groups_stream(ops)
            await ensure_share_stream(ops, "g-1")
            await ensure_share_stream(ops, "h")
            mismatches: list[str] = []
            for what, op, expected in _matrix(len(info.partitions)):
                for identity in IDENTITIES:
                    got = await _outcome(op, clients[identity], identity)
                    if got != expected[identity]:
                        mismatches.append(
                            f"{what} as {identity}: {got}, expected {expected[identity]}"
                        )
            # Plain NATS side doors: a raw client publishes on the internal streams' subjects
            # (stored nowhere) and on a user stream's subject (stored: NATS's to protect).
            p = partition_for_key(b"g-1", len(info.partitions))
            groups_hw = {q: await _hw(ops, GROUPS_STREAM, q) for q in (0, p)}
            share_hw = await _hw(ops, SHARE, 0)
            data_hw = await _hw(ops, "data.a", 0)
            nc = await nats.connect(nats_server.url)
            try:
                for subject in ("_jet.groups", f"_jet.groups.{p}", "_jet.share.g-1"):
                    await nc.publish(subject, _heartbeat("g-1"))
                await nc.publish("data.a", b"raw")
                await nats_flushed(nc)
                with anyio.fail_after(10):
                    header, _ = await ops.fetch(
                        "data.a", 0, data_hw, max_bytes=1 << 16, max_wait=10.0
                    )
                assert header.hw == data_hw + 1
            finally:
                await nc.close()
            for q, hw in groups_hw.items():
                if await _hw(ops, GROUPS_STREAM, q) != hw:
                    mismatches.append(f"raw NATS publish stored in {GROUPS_STREAM}/{q}")
            if await _hw(ops, SHARE, 0) != share_hw:
                mismatches.append(f"raw NATS publish stored in {SHARE}")
            assert not mismatches, "\n".join(mismatches)


async def _acls_or_empty(client: Client) -> dict[str, object]:
    with contextlib.suppress(PermissionDenied):
        return dict(await list_acls(client))
    return {}
