"""A sampler of a cluster's state for ``jet top`` and ``jet console``, through the SDK.

Each :meth:`ClusterSampler.sample` (about once a second) reads:

- the metadata (servers, streams, partitions, leaders, ISRs) and the metadata leader, from
  any server;
- every server directly (one long-lived client per server, :mod:`.server_links`; each
  server within its own 2 s bound): whether it answers, and
  its ``DescribeStream`` view of each stream, so a partition's HW, LEO, log start and size
  are those its **leader** reports and each follower's **replica lag** is the leader's LEO
  minus the follower's;
- the consumer groups: their names, found by reading the keys of the records of the
  internal ``__groups`` stream (incrementally), then each group's state
  (:func:`jetsdk.consumer.group_admin.read_group`): members, assignment, committed offsets;
  a partition's **group lag** is its HW minus the committed offset (HW minus log start
  without a commit).

Rates: **in msg/s** is the HW's growth per second between two successive samples; **out
msg/s** the growth of the groups' committed offsets on the partition (summed over groups),
i.e. what consumer groups processed, as the rate of their last commit step
(:class:`~jetserver.observe.rates.StepRate`: groups commit every few seconds, so a
per-sample growth read 0 most seconds and then several times the real rate).
:class:`History` keeps a window of them per stream and the lag per group for the console's
plots.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from jetsdk import Client, JetError, OffsetOutOfRange, StreamNotFound, StreamPartition
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import decode_json, encode_json
from jetsdk.codec.record import iter_records
from jetsdk.consumer.group_admin import read_group
from jetsdk.group.records import GROUPS_STREAM
from jetsdk.metadata import (
    INTERNAL_PREFIX,
    ClusterMetadata,
    StreamInfo,
    is_under_replicated,
    partition_state,
)
from jetsdk.retry import RetryPolicy
from jetserver.observe.rates import StepRate
from jetserver.observe.server_links import ServerLinks

NO_RETRY = RetryPolicy(attempts=1)
SERVER_TIMEOUT_S = 2.0
"""Bound on reaching one server directly."""
HISTORY_S = 600.0
"""How far back :class:`History` keeps samples."""
_SCAN_MAX_FETCHES = 1000
"""Bound on the Fetch requests of one incremental scan of a ``__groups`` partition."""

ClientFactory = Callable[[list[str] | None, float], Client]
"""``(servers or None for the configured ones, connect timeout) -> an unentered Client``."""


@attrs.frozen
class PartitionRow:
    """One partition as :meth:`ClusterSampler.sample` saw it."""

    stream: str
    partition: int
    leader: str | None
    leader_epoch: int
    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    hw: int | None
    leo: int | None
    log_start: int | None
    size_bytes: int | None
    replica_lag: dict[str, int | None]
    """Follower id -> leader LEO minus its LEO (None: the follower did not answer)."""
    in_rate: float | None
    out_rate: float | None
    offline: dict[str, str]
    """Replica id -> why that server's replica cannot open (its DescribeStream answer)."""
    offline_reason: str | None = None
    """Why the partition is offline (no live leader, as the cluster's liveness view finds
    it; or its leader's replica cannot open), None if it is not."""

    @property
    def is_offline(self) -> bool:
        """No live leader: nothing can be produced to it or read from it."""
        return self.offline_reason is not None

    @property
    def under_replicated(self) -> bool:
        """Offline, no leader, or fewer in-sync replicas than replicas."""
        return is_under_replicated(self.is_offline, self.leader, self.isr, self.replicas)

    @property
    def internal(self) -> bool:
        """A partition of an internal stream (``__groups``, ``__share.*``)."""
        return self.stream.startswith(INTERNAL_PREFIX)

    @property
    def state(self) -> str:
        """``offline``, ``under-replicated`` or ``ok``."""
        return partition_state(self.is_offline, self.under_replicated)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "stream": self.stream,
            "partition": self.partition,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "under_replicated": self.under_replicated,
            "is_offline": self.is_offline,
            "offline_reason": self.offline_reason,
            "state": self.state,
            "internal": self.internal,
            "hw": self.hw,
            "leo": self.leo,
            "log_start": self.log_start,
            "size_bytes": self.size_bytes,
            "replica_lag": self.replica_lag,
            "in_rate": self.in_rate,
            "out_rate": self.out_rate,
            "offline": self.offline,
        }


@attrs.frozen
class GroupPartition:
    """One partition a consumer group reads."""

    stream: str
    partition: int
    member: str | None
    """The member the assignment gives it to."""
    committed: int | None
    hw: int | None
    lag: int | None


@attrs.frozen
class GroupRow:
    """One consumer group."""

    name: str
    members: tuple[dict[str, Any], ...]
    """``{"member", "instance", "parked", "partitions": ["stream/p", ...]}``."""
    partitions: tuple[GroupPartition, ...]

    @property
    def lag(self) -> int:
        """Total lag over its partitions."""
        return sum(p.lag or 0 for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "name": self.name,
            "members": list(self.members),
            "lag": self.lag,
            "partitions": [attrs.asdict(p) for p in self.partitions],
        }


@attrs.frozen
class Snapshot:
    """The cluster at one moment."""

    at: float
    """Wall-clock time of the sample (seconds since the epoch)."""
    metadata_leader: str | None
    servers: tuple[dict[str, Any], ...]
    """``{"id", "address", "up", "live"}`` each: ``up`` if it answered this sample,
    ``live`` if the cluster's liveness view (of the server answering Metadata) has it."""
    streams: tuple[StreamInfo, ...]
    """As the metadata describes them (config: retention...)."""
    partitions: tuple[PartitionRow, ...]
    groups: tuple[GroupRow, ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "at": self.at,
            "metadata_leader": self.metadata_leader,
            "servers": list(self.servers),
            "streams": [s.to_json() for s in self.streams],
            "partitions": [p.to_json() for p in self.partitions],
            "groups": [g.to_json() for g in self.groups],
        }


@attrs.define
class History:
    """Recent per-stream rates and per-group lag: ``{"t": [...], "in": {stream: [...]},
    "out": {...}, "lag": {group: [...]}}`` with one entry per sample (None where absent)."""

    window_s: float = HISTORY_S
    samples: deque[tuple[float, dict[str, float], dict[str, float], dict[str, int]]] = attrs.field(
        factory=deque
    )

    def add(self, snap: Snapshot) -> None:
        """Record ``snap``'s rates and lags."""
        rate_in: dict[str, float] = {}
        rate_out: dict[str, float] = {}
        for p in snap.partitions:
            if p.in_rate is not None:
                rate_in[p.stream] = rate_in.get(p.stream, 0.0) + p.in_rate
            if p.out_rate is not None:
                rate_out[p.stream] = rate_out.get(p.stream, 0.0) + p.out_rate
        lags = {g.name: g.lag for g in snap.groups}
        self.samples.append((snap.at, rate_in, rate_out, lags))
        while self.samples and self.samples[0][0] < snap.at - self.window_s:
            self.samples.popleft()

    def to_json(self) -> dict[str, Any]:
        """The series, aligned on ``t``."""
        names_in = sorted({k for s in self.samples for k in s[1]})
        names_out = sorted({k for s in self.samples for k in s[2]})
        groups = sorted({k for s in self.samples for k in s[3]})
        return {
            "t": [s[0] for s in self.samples],
            "in": {n: [s[1].get(n) for s in self.samples] for n in names_in},
            "out": {n: [s[2].get(n) for s in self.samples] for n in names_out},
            "lag": {g: [s[3].get(g) for s in self.samples] for g in groups},
        }


class ClusterSampler:
    """Samples a cluster through ``client``, asking each server directly too (see the module
    doc). Use from one task at a time."""

    def __init__(self, client: Client, factory: ClientFactory) -> None:
        self.client = client
        self.factory = factory
        self._group_scan: dict[int, int] = {}
        self._group_names: set[str] = set()
        self._prev: tuple[float, dict[tuple[str, int], int], dict[tuple[str, int], int]] | None = (
            None
        )
        self._links = ServerLinks(self._open)
        self._last_groups: list[GroupRow] = []
        self._out_rates = StepRate()

    async def __aenter__(self) -> ClusterSampler:
        await self._links.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._links.__aexit__(None, None, None)

    def _open(self, address: str) -> Client:
        client = self.factory([address], SERVER_TIMEOUT_S)
        client.request_timeout = SERVER_TIMEOUT_S * 2
        # No retries: a server that stopped answering shows as down in this sample at once
        # (its connection refused), and the next sample reconnects.
        client.retry = NO_RETRY
        return client

    async def _server_view(self, address: str, names: list[str]) -> dict[str, StreamInfo]:
        client = await self._links.get(address)  # kept open from sample to sample
        view = {}
        for name in names:
            with contextlib.suppress(StreamNotFound):  # deleted meanwhile
                view[name] = await client.describe_stream(name)
        return view

    async def sample(self) -> Snapshot:
        """One snapshot (rates against the previous one).

        Raises:
            JetError: no server answered the metadata request.
        """
        raw = decode_json(
            await self.client.request_any(
                Api.METADATA, encode_json({"streams": None}), timeout=SERVER_TIMEOUT_S * 2
            )
        )
        meta = ClusterMetadata.from_json(raw)
        leader = raw.get("metadata_leader")
        names = sorted(meta.streams)
        views: dict[str, dict[str, StreamInfo]] = {}
        up: dict[str, bool] = {}

        async def visit(sid: str, address: str) -> None:
            up[sid] = False
            # One bound per server: a server that stopped answering (killed, paused,
            # cut off) costs this sample at most SERVER_TIMEOUT_S, the others none.
            with anyio.move_on_after(SERVER_TIMEOUT_S):
                try:
                    views[sid] = await self._server_view(address, names)
                    up[sid] = True
                except (JetError, OSError, TimeoutError):
                    pass

        # One long-lived client per server (ServerLinks), asked by a task per server.
        self._links.keep_only({server.address for server in meta.servers.values()})
        async with anyio.create_task_group() as tg:
            for sid, server in sorted(meta.servers.items()):
                tg.start_soon(visit, sid, server.address)
        now = time.time()
        groups = self._last_groups  # kept when the groups' log does not answer in time
        with anyio.move_on_after(SERVER_TIMEOUT_S):
            # Bounded: a __groups partition whose leader was just lost is read again once
            # another is elected; meanwhile the sample shows the groups as last seen.
            groups = self._last_groups = await self._groups(meta, views)
        hws: dict[tuple[str, int], int] = {}
        committed: dict[tuple[str, int], int] = {}
        for g in groups:
            for gp in g.partitions:
                if gp.committed is not None:
                    key = (gp.stream, gp.partition)
                    committed[key] = committed.get(key, 0) + gp.committed
        rows = []
        for name in names:
            for p in meta.streams[name].partitions:
                rows.append(self._row(name, p.partition, meta, views, hws, committed, now))
        self._prev = (now, hws, committed)
        return Snapshot(
            at=now,
            metadata_leader=leader if isinstance(leader, str) else None,
            servers=tuple(
                {"id": sid, "address": s.address, "up": up.get(sid, False), "live": s.live}
                for sid, s in sorted(meta.servers.items())
            ),
            streams=tuple(meta.streams[n] for n in names),
            partitions=tuple(rows),
            groups=tuple(groups),
        )

    def _row(
        self,
        name: str,
        number: int,
        meta: ClusterMetadata,
        views: dict[str, dict[str, StreamInfo]],
        hws: dict[tuple[str, int], int],
        committed: dict[tuple[str, int], int],
        now: float,
    ) -> PartitionRow:
        part = meta.streams[name].partitions[number]
        own_view = views.get(part.leader or "", {}).get(name)
        own = own_view.partition(number) if own_view is not None else None
        lag: dict[str, int | None] = {}
        offline: dict[str, str] = {}
        for sid in part.replicas:
            view = views.get(sid, {}).get(name)
            seen = view.partition(number) if view is not None else None
            if seen is not None and seen.offline is not None:
                offline[sid] = seen.offline
            if sid == part.leader:
                continue
            if own is None or own.leo is None or seen is None or seen.leo is None:
                lag[sid] = None
            else:
                lag[sid] = max(0, own.leo - seen.leo)
        key = (name, number)
        in_rate = out_rate = None
        if own is not None and own.hw is not None:
            hws[key] = own.hw
        if self._prev is not None:
            then, prev_hw, _ = self._prev
            dt = max(now - then, 1e-3)
            if key in hws and key in prev_hw:
                in_rate = max(0.0, (hws[key] - prev_hw[key]) / dt)
        if key in committed:
            out_rate = self._out_rates.rate(key, committed[key], time.monotonic())
        elif key in hws and self._prev is not None:
            out_rate = 0.0
        return PartitionRow(
            stream=name,
            partition=number,
            leader=part.leader,
            leader_epoch=part.leader_epoch,
            replicas=part.replicas,
            isr=part.isr,
            hw=own.hw if own is not None else None,
            leo=own.leo if own is not None else None,
            log_start=own.log_start if own is not None else None,
            size_bytes=own.size_bytes if own is not None else None,
            replica_lag=lag,
            in_rate=in_rate,
            out_rate=out_rate,
            offline=offline,
            offline_reason=part.offline
            or (offline.get(part.leader) if part.leader is not None else None),
        )

    async def _scan_group_names(self, meta: ClusterMetadata) -> None:
        info = meta.streams.get(GROUPS_STREAM)
        if info is None:
            return
        for p in range(info.partition_count):
            offset = self._group_scan.get(p, 0)
            for _ in range(_SCAN_MAX_FETCHES):
                try:
                    header, raw = await self.client.fetch(
                        GROUPS_STREAM, p, offset, max_bytes=1024 * 1024, max_wait=0
                    )
                except OffsetOutOfRange as exc:
                    offset = exc.log_start or 0
                    continue
                last = offset
                for record in iter_records(raw):
                    if record.key:
                        self._group_names.add(record.key.decode("utf-8", "replace"))
                    last = record.offset + 1
                offset = last
                if offset >= header.hw or not raw:
                    break
            self._group_scan[p] = offset

    async def _groups(
        self, meta: ClusterMetadata, views: dict[str, dict[str, StreamInfo]]
    ) -> list[GroupRow]:
        try:
            await self._scan_group_names(meta)
        except JetError:
            return []
        out = []
        for name in sorted(self._group_names):
            try:
                state = await read_group(self.client, name)
            except JetError:
                continue
            if state is None:
                continue
            assignment = state.assignment()
            owner = {sp: m for m, parts in assignment.items() for sp in parts}
            offsets = state.committed_offsets()
            # Every partition of the streams it reads or committed on (as group_lag does).
            keys = set(state.partitions()) | set(offsets)
            streams = {sp.stream for sp in keys}
            streams.update(s for m in state.members() for s in m.subscriptions)
            for stream in streams:
                info = meta.streams.get(stream)
                if info is not None:
                    keys.update(StreamPartition(stream, i) for i in range(info.partition_count))
            parts = []
            for sp in sorted(keys):
                committed = offsets.get(sp)
                entry = None if committed is None else committed.position
                part = self._leader_partition(meta, views, sp.stream, sp.partition)
                hw = part[0]
                base = entry.offset if entry is not None else part[1]
                lag = max(0, hw - base) if hw is not None and base is not None else None
                parts.append(
                    GroupPartition(
                        sp.stream,
                        sp.partition,
                        owner.get(sp),
                        None if entry is None else entry.offset,
                        hw,
                        lag,
                    )
                )
            members = tuple(
                {
                    "member": m.member,
                    "instance": m.instance,
                    "parked": m.parked,
                    "partitions": [
                        f"{sp.stream}/{sp.partition}" for sp in assignment.get(m.member, [])
                    ],
                }
                for m in state.members()
            )
            out.append(GroupRow(name, members, tuple(parts)))
        return out

    @staticmethod
    def _leader_partition(
        meta: ClusterMetadata, views: dict[str, dict[str, StreamInfo]], stream: str, number: int
    ) -> tuple[int | None, int | None]:
        info = meta.streams.get(stream)
        if info is None or number >= info.partition_count:
            return None, None
        leader = info.partitions[number].leader
        view = views.get(leader or "", {}).get(stream)
        seen = view.partition(number) if view is not None else None
        if seen is None:
            return None, None
        return seen.hw, seen.log_start
