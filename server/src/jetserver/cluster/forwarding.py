"""CreateStream / DeleteStream in a cluster: proposed by the metadata leader, forwarded there
from any other server.

A server receiving the request:

1. gives it an op id (the request's ``op_id`` if any): every retry below reuses it, and the
   state machine applies an op id at most once, so a retry across a leader change never
   creates or deletes twice and answers the first outcome;
2. if it is the metadata leader: validates the request, places the replicas
   (:mod:`.placement`, over the live registered servers), proposes the operation and waits
   for it to be applied; a new stream is answered once every partition leader has opened
   its replica (bounded), so a message published after the answer is captured;
3. otherwise forwards the request with ``op_id`` and ``forwarded: true`` to the metadata
   leader's client address, then waits until its own replicated state shows the outcome
   (read-your-writes on the server the client talks to);
4. retries retriable failures (no leader yet, leader changed, outcome unknown, connection
   lost) with backoff until ``forward_timeout_s``.

A CreateStream is one operation holding every partition's assignment, so a metadata
leader failure during a create leaves either the whole stream or nothing.

Task safety: one event loop; requests run concurrently (the Raft log orders them).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.errors import JetError
from jetserver.broker.stream_info import stream_info
from jetserver.broker.streams import StreamManager
from jetserver.cluster.controller import backoff_s
from jetserver.cluster.liveness import Liveness
from jetserver.cluster.peers import PeerPool
from jetserver.cluster.placement import place_replicas, server_load
from jetserver.cluster.rebalance import MAX_REBALANCE_BATCH, LeaderRebalancer
from jetserver.config.server import ServerConfig
from jetserver.errors import ApiError, invalid_argument
from jetserver.logs import fields
from jetserver.metadata.creation import create_stream_op, created_stream
from jetserver.metadata.model import Grant, MetadataState, StreamMeta
from jetserver.metadata.ops import DeleteStream, OpResult, SetAcl, UpdateStream
from jetserver.metadata.reserved import checked_spec
from jetserver.metadata.stream_update import update_op
from jetserver.metadata.validate import MAX_PARTITIONS
from jetserver.raft import (
    MetadataRaft,
    NotLeader,
    OutcomeUnknown,
    RaftError,
    RaftTimeout,
    Unavailable,
)
from jetserver.raft.machine import MAX_OP_ID_CHARS

log = logging.getLogger(__name__)

PARTITIONS_READY_TIMEOUT_S = 5.0
"""Bound on waiting for a new stream's partition leaders to open their replicas."""
LOCAL_SETTLE_TIMEOUT_S = 5.0
"""Bound on waiting for this server's state to show a forwarded operation's outcome."""
READY_POLL_S = 0.02
"""First pause between two readiness checks of a remote partition leader (doubling)."""
READY_POLL_MAX_S = 0.05
"""Longest pause between two readiness checks of a remote leader (one sentinel probe per
pause, not one per partition: 20 a second per server at most). Each partition polling
every 20 ms on its own was a third of the metadata leader's event loop while the other
servers opened their replicas; with one sentinel per server, a 0.2 s bound (until
2026-11-30) saw a server ready up to 0.2 s late, about 0.1 s of a 100-partition stream's
1 s creation at 10,000 partitions (issue 34: create <= 10 ms per partition)."""
_ANY_RF = 1 << 30
"""Replication factor bound given to request validation (placement checks the real one)."""


def op_id_of(request: Mapping[str, Any]) -> str:
    """The request's ``op_id``, or a new one.

    Raises:
        ApiError: INVALID_ARGUMENT if ``op_id`` is not a string of 1-128 characters.
    """
    value = request.get("op_id")
    if value is None:
        return uuid.uuid4().hex
    if not isinstance(value, str) or not 0 < len(value) <= MAX_OP_ID_CHARS:
        raise invalid_argument("op_id", f"op_id must be a string of 1-{MAX_OP_ID_CHARS} characters")
    return value


@attrs.define(eq=False)
class MetadataRequests:
    """Answers CreateStream and DeleteStream on any server of a cluster."""

    config: ServerConfig
    """Server configuration (limits and defaults for validation, forward timeout)."""
    raft: MetadataRaft
    """The metadata Raft member."""
    peers: PeerPool
    """Connections to the metadata leader and partition leaders."""
    liveness: Liveness
    """Which servers answer (placement uses the live ones)."""
    streams: StreamManager
    """This server's replicas (readiness of local partition leaders)."""
    rebalancer: LeaderRebalancer | None = None
    """Preferred-leader rounds (RebalanceLeaders; None: refused as unsupported)."""
    forwarded_requests: int = 0
    """Requests this server forwarded to the metadata leader."""

    @property
    def server_id(self) -> str:
        """This server's id."""
        return self.config.server.id

    # ------------------------------------------------------------------ entry points

    async def create_stream(self, request: dict[str, Any]) -> dict[str, Any]:
        """CreateStream: ``{"created", "stream"}``.

        Raises:
            ApiError: INVALID_ARGUMENT, STREAM_EXISTS, or a retriable code (UNAVAILABLE,
                TIMEOUT, NOT_LEADER) when no metadata leader answered in time.
        """
        self._spec(request)  # refuse a bad request before forwarding it
        op_id = op_id_of(request)

        async def settle(answer: dict[str, Any]) -> None:
            info = answer.get("stream")
            if isinstance(info, dict):
                name = info.get("name")
                await self._wait_local(lambda s: name in s.streams, f"stream {name} to appear")

        return await self._run(
            Api.CREATE_STREAM, request, op_id, lambda: self._create_here(request, op_id), settle
        )

    async def delete_stream(self, request: dict[str, Any]) -> dict[str, Any]:
        """DeleteStream: ``{"deleted": true}``.

        Raises:
            ApiError: STREAM_NOT_FOUND, or a retriable code as :meth:`create_stream`.
        """
        name = request.get("name")
        if not isinstance(name, str) or not name:
            raise invalid_argument("name", "name must be a non-empty string")
        op_id = op_id_of(request)
        before = self.raft.state.streams.get(name)

        async def settle(_answer: dict[str, Any]) -> None:
            def gone(state: MetadataState) -> bool:
                now = state.streams.get(name)
                return now is None or (before is not None and now.stream_id != before.stream_id)

            await self._wait_local(gone, f"stream {name} to disappear")

        return await self._run(
            Api.DELETE_STREAM, request, op_id, lambda: self._delete_here(name, op_id), settle
        )

    async def update_stream(self, request: dict[str, Any]) -> dict[str, Any]:
        """UpdateStream: ``{"stream": StreamInfo}`` once this server's state shows it.

        Raises:
            ApiError: INVALID_ARGUMENT, STREAM_NOT_FOUND, or a retriable code as
                :meth:`create_stream`.
        """
        op = self._update_op(request)  # refuse a bad request here
        op_id = op_id_of(request)
        wanted = dict(op.settings)

        def shows(state: MetadataState) -> bool:
            meta = state.streams.get(op.name)
            return meta is None or all(getattr(meta.spec, k) == v for k, v in wanted.items())

        async def here() -> dict[str, Any]:
            remembered = self.raft.machine.recent.get(op_id)
            if remembered is not None:
                result = remembered.result
            else:
                fresh = self._update_op(request)
                result = (await self.raft.propose(fresh, op_id=op_id)).result
            if not result.ok:
                raise ApiError(result.error_code, result.message, {"stream": op.name})
            log.info("stream updated", extra=fields(stream=op.name, settings=wanted))
            return {"stream": stream_info(self.raft.state.streams[op.name])}

        async def settle(_answer: dict[str, Any]) -> None:
            await self._wait_local(shows, f"settings of stream {op.name}")

        answer = await self._run(Api.UPDATE_STREAM, request, op_id, here, settle)
        meta = self.raft.state.streams.get(op.name)
        return answer if meta is None else {"stream": stream_info(meta)}

    async def set_acl(
        self, request: dict[str, Any], identity: str, grants: tuple[Grant, ...]
    ) -> None:
        """SetAcl (validated by the caller): replace ``identity``'s grants through Raft; with
        ``if_absent`` in the request, only if the identity has no entry yet.

        Raises:
            ApiError: a retriable code as :meth:`create_stream` when no leader answered.
        """
        op_id = op_id_of(request)
        if_absent = request.get("if_absent") is True

        async def here() -> dict[str, Any]:
            present = identity in self.raft.state.acls
            if self.raft.machine.recent.get(op_id) is None and not (if_absent and present):
                result = (await self.raft.propose(SetAcl(identity, grants), op_id=op_id)).result
                if not result.ok:
                    raise ApiError(result.error_code, result.message)
            return {"identity": identity}

        async def settle(_answer: dict[str, Any]) -> None:
            await self._wait_local(lambda s: identity in s.acls, f"acl of {identity}")

        await self._run(Api.SET_ACL, request, op_id, here, settle)

    async def rebalance_leaders(self, request: dict[str, Any]) -> dict[str, Any]:
        """RebalanceLeaders (api 14): one preferred-leader round on the metadata leader,
        ``{"moved", "refused", "remaining"}``; ``max`` (1..1000) bounds the round.

        Raises:
            ApiError: INVALID_ARGUMENT (``max``), UNSUPPORTED_API (no rebalancer), or a
                retriable code as :meth:`create_stream`.
        """
        limit = request.get("max")
        if limit is not None and (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 0 < limit <= MAX_REBALANCE_BATCH
        ):
            raise invalid_argument("max", f"max must be an int in 1..{MAX_REBALANCE_BATCH}")
        rebalancer = self.rebalancer
        if rebalancer is None:
            raise ApiError(ErrorCode.UNSUPPORTED_API, "RebalanceLeaders is not served here")

        async def here() -> dict[str, Any]:
            return (await rebalancer.rebalance(limit)).to_dict()

        async def settle(_answer: dict[str, Any]) -> None:
            return None

        return await self._run(Api.REBALANCE_LEADERS, request, op_id_of(request), here, settle)

    # ------------------------------------------------------------------ the retry loop

    async def _run(
        self,
        api: Api,
        request: dict[str, Any],
        op_id: str,
        here: Callable[[], Awaitable[dict[str, Any]]],
        settle: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> dict[str, Any]:
        forwarded = request.get("forwarded") is True
        bound = self.config.cluster.forward_timeout_s
        deadline = time.monotonic() + bound
        attempt = 0
        while True:
            attempt += 1
            try:
                if self.raft.is_leader:
                    return await here()
                if forwarded:
                    raise NotLeader(self.raft.leader_id, self.raft.leader_address)
                answer = await self._forward(api, request, op_id, deadline)
                await settle(answer)
                return answer
            except NotLeader as exc:
                if forwarded:
                    raise ApiError(
                        ErrorCode.NOT_LEADER,
                        "not the metadata leader",
                        {"leader": exc.leader_id},
                    ) from exc
                error: ApiError = ApiError(exc.code, str(exc))
            except (Unavailable, OutcomeUnknown) as exc:
                error = ApiError(exc.code, str(exc))
            except RaftError as exc:
                raise ApiError(exc.code, str(exc)) from exc
            except JetError as exc:
                code = _code(exc.code)
                if not exc.retriable:
                    raise ApiError(code, exc.message, exc.details) from exc
                error = ApiError(code, f"metadata leader: {exc.message or exc}", exc.details)
            pause = backoff_s(attempt)
            if time.monotonic() + pause >= deadline:
                raise ApiError(
                    error.code,
                    f"no metadata leader completed the request within {bound} s "
                    f"(last error: {error.message})",
                    error.details,
                )
            log.debug(
                "metadata request retried",
                extra=fields(api=api.name, op_id=op_id, attempt=attempt, error=error.message),
            )
            await anyio.sleep(pause)

    async def _forward(
        self, api: Api, request: dict[str, Any], op_id: str, deadline: float
    ) -> dict[str, Any]:
        leader = self.raft.leader_id
        address = self.raft.state.client_addresses().get(leader) if leader else None
        if address is None:
            if leader is None:
                raise Unavailable("no metadata leader is known (election in progress)")
            raise Unavailable(f"the metadata leader {leader} has not registered its address")
        body = dict(request)
        body.update(op_id=op_id, forwarded=True)
        self.forwarded_requests += 1
        timeout = max(1.0, deadline - time.monotonic())
        return await self.peers.request_json(address, api, body, timeout)

    async def _wait_local(self, done: Callable[[MetadataState], bool], what: str) -> None:
        deadline = time.monotonic() + LOCAL_SETTLE_TIMEOUT_S
        while not done(self.raft.state):
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise RaftTimeout(f"waited {LOCAL_SETTLE_TIMEOUT_S} s")
                await self.raft.wait_applied(self.raft.index + 1, timeout=remaining)
            except RaftError:
                log.warning("local metadata lags", extra=fields(waiting_for=what))
                return

    # ------------------------------------------------------------------ on the leader

    def _update_op(self, request: Mapping[str, Any]) -> UpdateStream:
        return update_op(
            request,
            self.raft.state.streams,
            self.config.limits.max_message_bytes,
            self.streams.link.max_payload,
        )

    def _spec(self, request: Mapping[str, Any]) -> Any:
        cfg = self.config
        return checked_spec(
            request,
            cluster_size=_ANY_RF,
            max_message_bytes=cfg.limits.max_message_bytes,
            default_segment_max_bytes=cfg.storage.segment_max_bytes,
            default_segment_max_age_s=cfg.storage.segment_max_age_s,
            nats_max_payload=self.streams.link.max_payload,
        )

    async def _create_here(self, request: Mapping[str, Any], op_id: str) -> dict[str, Any]:
        spec = self._spec(request)
        state = self.raft.state
        remembered = self.raft.machine.recent.get(op_id)
        existing = state.streams.get(spec.name)
        result: OpResult
        phases: dict[str, float] = {}  # of a creation proposed here, for its log line
        if remembered is not None:
            result = remembered.result
        elif existing is not None and existing.spec == spec:
            result = OpResult(created=False, stream=existing)
        else:
            started = time.perf_counter()
            if self.streams.disk is not None:
                self.streams.disk.check_now()  # DiskFull: this (metadata leader's) disk is low
            await self.liveness.recheck_down()
            replicas = place_replicas(
                spec.partitions,
                spec.replication_factor,
                self.liveness.live_servers(),
                server_load(state.streams.values()),
            )
            op = create_stream_op(spec, replicas)
            placed = time.perf_counter()
            result = (await self.raft.propose(op, op_id=op_id)).result
            phases = {"place_s": placed - started, "commit_s": time.perf_counter() - placed}
        stream = created_stream(result, spec)
        if result.created:
            ready_from = time.perf_counter()
            await self._wait_partitions_ready(stream)
            if phases:  # placing, the metadata Raft's commit and apply here, every
                # partition leader serving (bench scale_cluster reads them)
                phases["ready_s"] = time.perf_counter() - ready_from
                log.info(
                    "stream creation phases",
                    extra=fields(
                        stream=spec.name,
                        partitions=spec.partitions,
                        **{k: round(v, 4) for k, v in phases.items()},
                    ),
                )
        return {"created": result.created, "stream": stream_info(stream)}

    async def _delete_here(self, name: str, op_id: str) -> dict[str, Any]:
        remembered = self.raft.machine.recent.get(op_id)
        if remembered is not None:
            result = remembered.result
        else:
            result = (await self.raft.propose(DeleteStream(name), op_id=op_id)).result
        if not result.ok:
            raise ApiError(result.error_code, result.message, {"stream": name})
        log.info("stream deleted", extra=fields(stream=name))
        return {"deleted": True}

    async def _wait_partitions_ready(self, meta: StreamMeta) -> None:
        """Wait (bounded) until every partition leader has opened its replica."""
        remote: dict[str, list[int]] = {}
        with anyio.move_on_after(PARTITIONS_READY_TIMEOUT_S) as scope:
            async with anyio.create_task_group() as tg:
                for a in meta.partitions[:MAX_PARTITIONS]:
                    if a.leader == self.server_id:
                        tg.start_soon(self.streams.wait_partition_ready, meta.name, a.partition)
                    else:
                        remote.setdefault(a.leader, []).append(a.partition)
                for leader, partitions in remote.items():
                    tg.start_soon(self._wait_leader_ready, meta.name, leader, partitions)
        if scope.cancelled_caught:
            log.warning(
                "stream created, but not every partition leader opened its replica in time",
                extra=fields(stream=meta.name, timeout_s=PARTITIONS_READY_TIMEOUT_S),
            )

    async def _wait_leader_ready(self, name: str, leader: str, partitions: list[int]) -> None:
        """Wait until the server ``leader`` serves each of ``partitions`` (ListOffsets
        answers, spec/protocol.md): probe the first one not seen ready, backing off while
        it is not; once it is, probe all the others at once, and go on with the first of
        them that was not. A server opens a new stream's replicas in partition order, so
        while it has not, one probe per pause goes to it instead of one per partition
        (each partition polling on its own: 8 ListOffsets per partition, at 1,000-3,000
        partitions on a loaded 2-core machine)."""
        pending = partitions
        pause = READY_POLL_S
        while pending:  # bounded by _wait_partitions_ready's deadline
            if not await self._serves(name, pending[0], leader):
                await anyio.sleep(pause)
                pause = min(pause * 2, READY_POLL_MAX_S)
                continue
            pause = READY_POLL_S
            rest = pending[1:]
            ready = [False] * len(rest)
            async with anyio.create_task_group() as tg:
                for i, partition in enumerate(rest):
                    tg.start_soon(self._probe_into, ready, i, name, partition, leader)
            pending = [p for p, ok in zip(rest, ready, strict=True) if not ok]

    async def _probe_into(
        self, ready: list[bool], i: int, name: str, partition: int, leader: str
    ) -> None:
        ready[i] = await self._serves(name, partition, leader)

    async def _serves(self, name: str, partition: int, leader: str) -> bool:
        """True if ``leader`` answers ListOffsets for the partition (it applied its role)."""
        address = self.raft.state.client_addresses().get(leader)
        if address is None:
            return False
        request = {"stream": name, "partition": partition, "position": "latest"}
        try:
            await self.peers.request_json(address, Api.LIST_OFFSETS, request, 1.0)
        except JetError:
            return False
        return True


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN
