"""What each server of a test cluster says, and bounded waits on it.

Every server is asked directly (a fresh connection, a short timeout), so a dead or paused
server answers None instead of blocking the test, and a server's own view (its HW, its
idea of the leader and ISR) can be told apart from another's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import anyio
import attrs

from cluster.checkers import Stored
from cluster.harness import Cluster, WaitTimeout, wait_until_async
from cluster.records import read_disk_log, stored_from_raw
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.fetch_messages import FetchRequest, decode_fetch_response, encode_fetch_request
from jetsdk.codec.frames import Api
from jetsdk.metadata import PartitionInfo
from support.raw_client import RawClient, ServerError

VIEW_TIMEOUT_S = 1.0
"""Bound on one per-server request."""
POLL_S = 0.1
"""Pause between two polls of a wait. A poll asks every live server over a fresh connection
(about 1.5 ms of CPU a server, in it and in the test): 5 s of a wait that does not end, on
an idle 3-server cluster at load ~24, cost 0.71/0.60/0.68 CPU-s (servers and test) at
0.05 s, 0.57/0.48/0.57 at 0.1 s; a wait ends on average 25 ms later."""
CAUGHT_UP_POLL_S = 0.2
"""Pause between two polls of :func:`wait_caught_up` (each reads the replicas' files)."""
READ_TIMEOUT_S = 10.0
"""Bound on one Fetch of :func:`read_through`."""
MAX_READ_REQUESTS = 100_000
"""Bound on the Fetch requests of one :func:`read_through`."""


async def partition_view(address: str, stream: str) -> dict[int, dict[str, Any]] | None:
    """DescribeStream answered by one server: partition -> its JSON (None if no answer)."""
    try:
        with anyio.fail_after(VIEW_TIMEOUT_S):
            async with await RawClient.connect(address) as raw:
                answer = await raw.describe(stream)
    except Exception:  # no answer: a dead or paused server, an error frame
        return None
    return _partitions(answer)


def _partitions(answer: dict[str, Any]) -> dict[int, dict[str, Any]] | None:
    parts = answer.get("partitions")
    if not isinstance(parts, list):
        return None
    return {int(p["partition"]): p for p in parts if isinstance(p, dict)}


@attrs.define(eq=False)
class KeptViews:
    """:func:`partition_view` over one kept connection per server, for a poller that asks
    every server many times a second (the HW monitor): a fresh connection per ask cost
    about four times the CPU of the ask itself, in the server and in the test (300 asks of
    an idle 3-server cluster: 0.21 + 0.23 CPU-s fresh, 0.05 + 0.05 kept). A connection
    that fails or times out is dropped, and one that was closed under it (a restarted
    server) is replaced at once, so a dead or paused server still answers None and a
    restarted one its new view. Used by one task at a time; :meth:`aclose` at the end."""

    links: dict[str, RawClient] = attrs.field(factory=dict)

    async def view(self, address: str, stream: str) -> dict[int, dict[str, Any]] | None:
        """As :func:`partition_view`."""
        kept = self.links.pop(address, None)
        if kept is not None:
            answer, closed = await self._ask(address, kept, stream)
            if not closed:
                return answer
        try:
            with anyio.fail_after(VIEW_TIMEOUT_S):
                raw = await RawClient.connect(address)
        except Exception:  # a dead or paused server
            return None
        return (await self._ask(address, raw, stream))[0]

    async def _ask(
        self, address: str, raw: RawClient, stream: str
    ) -> tuple[dict[int, dict[str, Any]] | None, bool]:
        """(the view or None, whether the server had closed the connection). The
        connection is kept if it answered (a view or an error frame), else closed."""
        closed = sound = False
        answer: dict[str, Any] | None = None
        try:
            with anyio.fail_after(VIEW_TIMEOUT_S):
                answer = await raw.describe(stream)
            sound = True
        except ServerError:  # an error frame: the connection is sound
            sound = True
        except TimeoutError:  # slow or paused: a late answer could still come on it
            pass
        except Exception:  # closed by the server (killed, restarted)
            closed = True
        finally:
            if sound:
                self.links[address] = raw
            else:
                with anyio.CancelScope(shield=True):
                    await raw.stream.aclose()
        return (_partitions(answer) if answer is not None else None), closed

    async def aclose(self) -> None:
        """Close every kept connection."""
        links, self.links = list(self.links.values()), {}
        with anyio.CancelScope(shield=True):
            for raw in links:
                await raw.stream.aclose()


async def partition_info(
    cluster: Cluster, stream: str, partition: int, *, exclude: Iterable[str] = ()
) -> PartitionInfo | None:
    """The freshest metadata of the partition among the live servers (not in ``exclude``).

    Every live server is asked: one cut off from the metadata Raft (a deposed leader just
    after a heal, say) still answers with the assignment it last applied, and trusting the
    first answer let a test verify before the deposed leader had even heard of its new
    epoch. The freshest view is the one with the highest leader epoch; among equal epochs,
    the one the leader it names gave (it applies its own ISR changes first).
    """
    skip = set(exclude)
    views: dict[str, PartitionInfo] = {}

    async def ask(server_id: str, address: str) -> None:
        view = await partition_view(address, stream)
        if view is not None and partition in view:
            views[server_id] = PartitionInfo.from_json(view[partition])

    async with anyio.create_task_group() as tg:
        for s in cluster.live():
            if s.server_id not in skip:
                tg.start_soon(ask, s.server_id, s.address)
    if not views:
        return None
    return max(views.items(), key=lambda kv: (kv[1].leader_epoch, kv[0] == kv[1].leader))[1]


async def wait_info(
    cluster: Cluster,
    stream: str,
    partition: int,
    accept: Callable[[PartitionInfo], bool],
    timeout_s: float,
    what: str,
) -> PartitionInfo:
    """Poll until a live server reports partition metadata that ``accept`` likes.

    Raises:
        WaitTimeout: not within ``timeout_s`` (the last view is in the message).
    """
    last: list[PartitionInfo] = []

    async def accepted() -> bool:
        info = await partition_info(cluster, stream, partition)
        if info is not None:
            last[:] = [info]
        return info is not None and accept(info)

    try:
        await wait_until_async(
            accepted, timeout_s, f"{what} ({stream}/{partition})", interval_s=POLL_S
        )
    except WaitTimeout as exc:
        raise WaitTimeout(f"{exc}; {last[0] if last else None}") from None
    return last[0]


async def wait_leader(
    cluster: Cluster,
    stream: str,
    partition: int,
    timeout_s: float,
    *,
    not_on: str | None = None,
    min_epoch: int = 0,
) -> PartitionInfo:
    """Wait for a leader that runs (and is not ``not_on``), with epoch >= ``min_epoch``, and
    that itself reports being the leader."""
    live = {s.server_id: s for s in cluster.live()}

    async def ok(info: PartitionInfo) -> bool:
        if info.leader is None or info.leader == not_on or info.leader_epoch < min_epoch:
            return False
        server = live.get(info.leader)
        if server is None or not server.alive or server.paused:
            return False
        own = await partition_view(server.address, stream)
        return own is not None and partition in own and own[partition].get("leader") == info.leader

    deadline = time.monotonic() + timeout_s
    last: PartitionInfo | None = None
    while True:
        live = {s.server_id: s for s in cluster.live()}
        info = await partition_info(cluster, stream, partition)
        if info is not None:
            last = info
            if await ok(info):
                return info
        if time.monotonic() > deadline:
            raise WaitTimeout(
                f"no leader for {stream}/{partition} (not {not_on}, epoch >= {min_epoch}) "
                f"within {timeout_s} s; last view {last}"
            )
        await anyio.sleep(POLL_S)


def replica_logs(
    cluster: Cluster, stream: str, partition: int, replicas: Iterable[str]
) -> dict[str, list[Stored]]:
    """Each replica's records as its segment files hold them."""
    return {sid: read_disk_log(cluster.server(sid).data_dir, stream, partition) for sid in replicas}


async def wait_caught_up(
    cluster: Cluster, stream: str, partition: int, timeout_s: float
) -> tuple[PartitionInfo, int]:
    """Wait until every replica's files hold every offset below the leader's HW, with the
    leader's HW stable over two polls; return the leader's view and that HW."""
    deadline = time.monotonic() + timeout_s
    previous = -1
    status = "no view"
    while True:
        info = await partition_info(cluster, stream, partition)
        leader = cluster.server(info.leader) if info is not None and info.leader else None
        own = await partition_view(leader.address, stream) if leader is not None else None
        if info is not None and own is not None and partition in own:
            hw = own[partition].get("hw")
            if isinstance(hw, int):
                logs = await anyio.to_thread.run_sync(
                    replica_logs, cluster, stream, partition, info.replicas
                )
                ends = {sid: (rs[-1].offset + 1 if rs else 0) for sid, rs in logs.items()}
                status = f"hw {hw}, replica ends {ends}, isr {info.isr}"
                if hw == previous and all(end >= hw for end in ends.values()):
                    return info, hw
                previous = hw
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{stream}/{partition} replicas not caught up: {status}")
        await anyio.sleep(CAUGHT_UP_POLL_S)


async def wait_full_isr(
    cluster: Cluster, stream: str, partition: int, rf: int, timeout_s: float
) -> tuple[PartitionInfo, str]:
    """Wait until the partition has a leader and ``rf`` in-sync replicas; (info, leader)."""
    info = await wait_info(
        cluster,
        stream,
        partition,
        lambda i: i.leader is not None and len(i.isr) == rf,
        timeout_s,
        f"a full ISR of {rf}",
    )
    assert info.leader is not None
    return info, info.leader


async def read_through(address: str, stream: str, partition: int) -> tuple[list[Stored], int] | str:
    """Every record a consumer can read at this server (the leader, or an ISR follower as a
    read replica: up to its own HW), with the HW it reported; or why it refused."""
    out: list[Stored] = []
    offset = 0
    async with await RawClient.connect(address) as raw:
        for _ in range(MAX_READ_REQUESTS):
            body = encode_fetch_request(FetchRequest(stream, partition, offset, 1 << 20, 0))
            try:
                frame = await raw.request(Api.FETCH, body, READ_TIMEOUT_S)
            except ServerError as exc:
                return f"{address} refused: {exc}"
            header, records = decode_fetch_response(frame.body)
            if header.error_code != ErrorCode.NONE:
                return f"{address} answered {ErrorCode(header.error_code).name}"
            got = stored_from_raw(partition, records)
            out.extend(got)
            if got:
                offset = got[-1].offset + 1
            if offset >= header.hw or not got:
                return out, header.hw
    raise AssertionError(f"read of {stream}/{partition} at {address} did not finish")
