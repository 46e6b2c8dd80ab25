"""Helpers for the control-plane cluster tests: a 3-server dev cluster, metadata reads,
bounded waits.

Every wait is bounded in time (and polls at a fixed interval); servers are started and
killed by PID through :class:`jetserver.testing.devcluster.DevCluster`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio

from jetserver.metadata.model import StreamSpec
from jetserver.metadata.ops import CreateStream
from jetserver.raft import MetadataRaft, RaftConfig
from jetserver.testing import Cluster as KitCluster
from jetserver.testing import WaitTimeout, free_ports, wait_until_async
from jetserver.testing.devcluster import DevCluster
from raft.kit import FAST_TIMINGS
from support.raw_client import RawClient, ServerError

T = TypeVar("T")

WAIT_S = 15.0
"""Default bound of :func:`eventually`."""
POLL_S = 0.05
"""Polling interval of :func:`eventually`."""
REQUEST_S = 20.0
"""Bound on one request in these helpers (a forwarded create may retry for 10 s and wait
5 s for its partition leaders)."""

RAFT_PASSWORD = "elections-test-password-0123"


@asynccontextmanager
async def one_member_raft(root: Path) -> AsyncIterator[MetadataRaft]:
    """A real one-member metadata Raft (leading) in ``root``, holding stream ``orders``
    (one partition, replicas s1, s2, s3; s1 leads at epoch 0)."""
    config = RaftConfig(
        server_id="s1",
        address=f"127.0.0.1:{free_ports(1)[0]}",
        peers=(),
        data_dir=root / "raft",
        password=RAFT_PASSWORD,
        fsync=False,
        **FAST_TIMINGS,  # one member on loopback: no need for the servers' margin
    )
    async with MetadataRaft(config) as node:
        await node.wait_leader(timeout=10)
        spec = StreamSpec(name="orders", subject="orders", replication_factor=3)
        applied = await node.propose(CreateStream(spec, "id1", 1, (("s1", "s2", "s3"),)))
        assert applied.result.ok
        yield node


@contextmanager
def dev_cluster(
    root: Path, servers: int = 3, settings: Mapping[str, Any] | None = None
) -> Iterator[DevCluster]:
    """A started dev cluster (logs in ``root/servers.log``, ``settings`` in its servers'
    config files), stopped by PID on exit."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "servers.log", "ab") as log:
        cluster = DevCluster(
            size=servers, root=root / "data", log_file=log, settings=settings or {}
        )
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()


async def call(address: str, api_call: Callable[[RawClient], Awaitable[T]]) -> T:
    """Connect to ``address``, run ``api_call`` on the connection, bounded by REQUEST_S."""
    with anyio.fail_after(REQUEST_S):
        async with await RawClient.connect(address) as c:
            return await api_call(c)


async def metadata(address: str) -> dict[str, Any]:
    """The Metadata answer of the server at ``address``."""
    return await call(address, lambda c: c.metadata())


async def eventually(
    check: Callable[[], Awaitable[T | None]], what: str, timeout_s: float = WAIT_S
) -> T:
    """Poll ``check`` until it returns a value that is not None (errors count as None).

    Raises:
        WaitTimeout: not within ``timeout_s``, with the last error seen.
    """
    got: list[T] = []
    last: list[BaseException] = []

    async def answered() -> bool:
        try:
            value = await check()
        except (OSError, ServerError, TimeoutError, anyio.BrokenResourceError) as exc:
            last[:] = [exc]
            return False
        if value is not None:
            got.append(value)
        return value is not None

    try:
        await wait_until_async(answered, timeout_s, what, interval_s=POLL_S)
    except WaitTimeout as exc:
        raise WaitTimeout(f"{exc} (last error: {last[0] if last else None!r})") from None
    return got[0]


async def metadata_leader(cluster: KitCluster, exclude: str | None = None) -> str:
    """The metadata leader all live servers agree on (bounded wait)."""

    async def agreed() -> str | None:
        seen = set()
        for p in cluster.servers:
            if p.alive and p.server_id != exclude:
                seen.add((await metadata(p.address)).get("metadata_leader"))
        if len(seen) == 1:
            leader = seen.pop()
            if leader is not None and leader != exclude:
                return str(leader)
        return None

    return await eventually(agreed, "one metadata leader agreed by every live server")


def assignments(answer: dict[str, Any], stream: str) -> list[tuple[str, tuple[str, ...], int]]:
    """``(leader, replicas, leader_epoch)`` per partition of ``stream`` in a Metadata answer."""
    for info in answer["streams"]:
        if info["name"] == stream:
            return [
                (p["leader"], tuple(p["replicas"]), p["leader_epoch"]) for p in info["partitions"]
            ]
    return []
