"""Request dispatch: one frame in, one :class:`Reply` out (never raises).

Errors are converted here, at the single inbound boundary: ApiError becomes an error frame
with its code; a body that does not decode becomes MALFORMED_FRAME and closes the
connection; anything unexpected becomes UNKNOWN (logged with its traceback).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.fetch_messages import (
    FETCH_RESPONSE_HEADER_SIZE,
    decode_fetch_request,
    encode_fetch_response_header,
)
from jetsdk.codec.fetch_stream import decode_fetch_stream_request
from jetsdk.codec.frames import (
    FLAG_MORE,
    FLAG_RESPONSE,
    Api,
    Frame,
    encode_frame,
    encode_frame_header,
)
from jetsdk.codec.messages import ProduceHead, decode_json, decode_produce_head, encode_json
from jetsdk.codec.replica_fetch import (
    decode_replica_fetch_request,
    replica_fetch_response_parts,
)
from jetserver.broker.fetch import FetchAnswer, fetch, offset_for_leader_epoch
from jetserver.broker.fetch_stream import FetchStream
from jetserver.broker.live_settings import LiveLogSettings
from jetserver.broker.local_streams import LocalStreams
from jetserver.broker.pending_opens import PartitionOpening
from jetserver.broker.produce import ProduceService
from jetserver.broker.replica_answers import HELD, ReplicaFetchReply
from jetserver.broker.replica_fetch import SessionWakers, replica_fetch
from jetserver.broker.replica_sessions import LeaderSessions
from jetserver.broker.stream_info import StreamInfoCache
from jetserver.broker.streams import StreamManager
from jetserver.cluster.report_parse import parse_report, parse_reports
from jetserver.config.server import ServerConfig
from jetserver.errors import ApiError
from jetserver.infra import hops
from jetserver.logs import fields
from jetserver.protocol import json_api, stream_control
from jetserver.protocol.connection import ANSWER_NOW, Reply, error_reply
from jetserver.protocol.gate_port import RequestGate, Session
from jetserver.protocol.held import HELD_REPLY, HOLD, HeldRequest
from jetserver.protocol.produce_many import ProduceMany
from jetserver.protocol.stream_admin import purge_partition, update_stream
from jetserver.raft.errors import RaftError
from jetserver.storage import StorageError

if TYPE_CHECKING:
    from jetserver.cluster import ClusterNode
    from jetserver.cluster.forwarding import MetadataRequests

log = logging.getLogger(__name__)


STALE_METADATA_GRACE_S = 1.0
"""In a cluster, how long a server waits for its Raft state to apply a stream it does not
know (created through another server a moment ago) before it answers STREAM_NOT_FOUND."""
_UNKNOWN_NAME = frozenset({ErrorCode.STREAM_NOT_FOUND, ErrorCode.PARTITION_NOT_FOUND})
"""Errors that a starting cluster server turns into UNAVAILABLE (see Dispatcher.handle)."""
_PRODUCE = int(Api.PRODUCE)  # (plain ints: an enum member's look-up costs ~170 ns on 3.11)
_PRODUCE_MANY = int(Api.PRODUCE_MANY)
_SENT = Reply(b"", sent=True)
"""The reply of a Produce or ReplicaFetch request answered already, with nothing left to do
(a frozen value: one for all)."""


@attrs.define(eq=False)
class Dispatcher:
    """Answers requests for one server (shared by all connections)."""

    config: ServerConfig
    """Server configuration."""
    streams: StreamManager
    """Streams and partitions."""
    produce: ProduceService
    """Produce through NATS."""
    address: str = ""
    """Advertised ``host:port`` of this server."""
    shutting_down: bool = False
    """Set at shutdown: new requests get SHUTTING_DOWN."""
    cluster: ClusterNode | None = None
    """The control plane, in a cluster (None: a server alone)."""
    local: LocalStreams | None = None
    """A server alone: CreateStream and DeleteStream (None in a cluster: :attr:`cluster`)."""
    security: RequestGate | None = None
    """Authentication and authorization gate (None: nothing checked)."""
    consumer_positions: dict[tuple[str, int], int] = attrs.field(factory=dict)
    """(stream, partition) -> offset of the latest consumer Fetch (metrics: consumer lag)."""
    session_wakers: SessionWakers = attrs.field(factory=SessionWakers)
    leader_sessions: LeaderSessions = attrs.field(factory=LeaderSessions)
    """Followers' fetch sessions held here: their parked partitions (incremental requests)."""
    live_settings: LiveLogSettings = attrs.field(factory=LiveLogSettings)
    """A server alone: applies UpdateStream's settings to the open logs."""
    observe: Callable[[int, bytes, float], None] | None = None
    """Counts a request answered by :meth:`produce_now` (api, response frame, seconds):
    the server's request metrics, as its handler counts the others (None: not counted)."""
    _many: ProduceMany | None = attrs.field(default=None, init=False, repr=False)
    _stream_infos: StreamInfoCache = attrs.field(factory=StreamInfoCache, init=False, repr=False)
    """Metadata answers' StreamInfo, reused while a stream and the liveness view stay."""

    def is_down(self, server_id: str) -> bool:
        """This server's liveness view: True if ``server_id`` does not answer its probes
        (never without a cluster)."""
        return self.cluster is not None and self.cluster.liveness.is_down(server_id)

    def servers(self) -> list[dict[str, Any]]:
        """The Metadata ``servers`` list: every registered server of the cluster (this
        server alone without a cluster, or before its registration is applied), each with
        ``live``: false if it does not answer this server's liveness probes."""
        me: dict[str, Any] = {"id": self.config.server.id, "address": self.address, "live": True}
        if self.cluster is None:
            return [me]
        registered = self.cluster.raft.state.servers
        listed: list[dict[str, Any]] = [
            {"id": s.server_id, "address": s.client_address, "live": not self.is_down(s.server_id)}
            for s in sorted(registered.values(), key=lambda s: s.server_id)
        ]
        if self.config.server.id not in registered:
            listed = sorted([*listed, me], key=lambda s: str(s["id"]))
        return listed

    async def handle(self, frame: Frame, session: Session | None = None) -> Reply:
        """Answer one request frame (``session``: what the connection authenticated as)."""
        api = frame.api
        try:
            if self.shutting_down:
                raise ApiError(ErrorCode.SHUTTING_DOWN, "server is shutting down")
            head: ProduceHead | None = None
            security = self.security
            if security is not None:
                session = session or Session()
                if security.screens(api):
                    if api == Api.PRODUCE and security.authorizes(session):
                        head = decode_produce_head(frame.body)  # once, for ACLs and Produce
                    screened = await security.screen(frame, session, head)
                    if screened is not None:
                        return screened
            if api == _PRODUCE_MANY:
                return await self._produce_many().handle(frame, session)
            try:
                return await self._dispatch(frame, head)
            except PartitionOpening as exc:  # opens next (after a restart): wait, bounded
                await exc.opened()
                return await self._dispatch(frame, head)
            except ApiError as exc:
                if exc.code not in _UNKNOWN_NAME or self.cluster is None or self.starting:
                    raise
                return await self._dispatch_after_catching_up(frame, exc)
        except Exception as exc:
            return self._error_reply(frame, exc)

    def _error_reply(self, frame: Frame, error: Exception) -> Reply:
        """The error frame that answers ``error`` (raised by the request of ``frame``)."""
        api, cid = frame.api, frame.correlation_id
        if isinstance(error, ApiError):
            if error.code in _UNKNOWN_NAME and self.starting:
                # Its Raft state may still be behind (e.g. after a restart of the whole
                # cluster the log is applied only once a leader commits): "does not exist"
                # would be a lie a client acts on. It is retriable instead.
                return error_reply(
                    api,
                    cid,
                    ErrorCode.UNAVAILABLE,
                    f"server is starting, its metadata may not be current yet ({error.message})",
                    error.details,
                )
            return error_reply(api, cid, error.code, error.message, error.details)
        if isinstance(error, StorageError):
            details = {"retriable": error.retriable}
            return error_reply(api, cid, error.code, f"storage: {error}", details)
        if isinstance(error, CodecError):
            return error_reply(
                api,
                cid,
                ErrorCode.MALFORMED_FRAME,
                f"request body does not decode: {error}",
                close=True,
            )
        log.error("request failed", exc_info=error, extra=fields(api=api))
        return error_reply(api, cid, ErrorCode.UNKNOWN, f"internal error: {error!r}")

    def _dispatch(
        self, frame: Frame, produce_head: ProduceHead | None = None
    ) -> Coroutine[Any, Any, Reply]:
        """The API's handler coroutine (a plain call, not a coroutine of its own: no frame
        to create and resume on every request).

        Raises:
            ApiError: UNSUPPORTED_API (at once).
        """
        api = frame.api
        if api == _PRODUCE:
            return self._produce(frame, produce_head)
        if api == Api.FETCH:
            return self._fetch(frame)
        if api == Api.FETCH_STREAM:
            return self._fetch_stream(frame)
        if api == Api.REPLICA_FETCH:
            return self._replica_fetch(frame)
        json_handler = self._json_handlers().get(api)
        if json_handler is None:
            raise ApiError(ErrorCode.UNSUPPORTED_API, f"unknown API key {api}", {"api": api})
        return self._json(frame, json_handler)

    async def _json(
        self,
        frame: Frame,
        json_handler: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
    ) -> Reply:
        request = decode_json(frame.body)
        response = await json_handler(request)
        return Reply(
            encode_frame(
                frame.api, frame.correlation_id, encode_json(response), flags=FLAG_RESPONSE
            )
        )

    async def _dispatch_after_catching_up(self, frame: Frame, error: ApiError) -> Reply:
        """A stream this server does not know may be one that another server created a
        moment ago and whose Raft entry it has not applied yet: ask again after each entry
        it applies, for up to STALE_METADATA_GRACE_S; then ``error`` stands."""
        deadline = time.monotonic() + STALE_METADATA_GRACE_S
        while await self._applied_more(deadline):
            try:
                return await self._dispatch(frame)
            except ApiError as exc:
                if exc.code not in _UNKNOWN_NAME:
                    raise
                error = exc
        raise error

    async def _applied_more(self, deadline: float) -> bool:
        """Wait until this server applies one more metadata entry; False at ``deadline``."""
        assert self.cluster is not None
        raft = self.cluster.raft
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        try:
            await raft.wait_applied(raft.index + 1, timeout=remaining)
        except RaftError:
            return False
        return True

    def _produce_many(self) -> ProduceMany:
        """The ProduceMany side (made on first use: it holds this dispatcher's parts)."""
        many = self._many
        if many is None:
            many = self._many = ProduceMany(
                self.produce,
                self.security,
                starting=lambda: self.starting,
                applied_more=self._applied_more if self.cluster is not None else None,
                stale_grace_s=STALE_METADATA_GRACE_S,
            )
        return many

    @property
    def starting(self) -> bool:
        """In a cluster: this server has not yet registered and reconciled its replicas."""
        return self.cluster is not None and not self.cluster.reconciled.is_set()

    def _json_handlers(self) -> dict[int, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]]:
        async def hello(req: dict[str, Any]) -> dict[str, Any]:
            return json_api.hello(req, self.config)

        async def metadata(req: dict[str, Any]) -> dict[str, Any]:
            answer = json_api.metadata(
                req, self.streams, self.servers(), self.is_down, self._stream_infos
            )
            names = req.get("streams")
            if self.starting and (
                not isinstance(names, list) or len(answer["streams"]) < len(set(names))
            ):
                # Its Raft state may be behind: a stream missing from this answer would
                # read as "does not exist" to a client (the SDK asks for everything).
                raise ApiError(ErrorCode.UNAVAILABLE, "server is starting")
            if self.cluster is not None and isinstance(names, list):
                deadline = time.monotonic() + STALE_METADATA_GRACE_S
                while len(answer["streams"]) < len(set(names)) and await self._applied_more(
                    deadline
                ):
                    answer = json_api.metadata(
                        req, self.streams, self.servers(), self.is_down, self._stream_infos
                    )
            if self.cluster is not None:
                answer["metadata_leader"] = self.cluster.raft.leader_id
            return answer

        def by_mode(
            in_cluster: Callable[[MetadataRequests, dict[str, Any]], Awaitable[dict[str, Any]]],
            alone: Callable[[dict[str, Any], LocalStreams], Awaitable[dict[str, Any]]],
        ) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
            """A handler that asks the metadata Raft in a cluster, the local streams alone."""

            async def handler(req: dict[str, Any]) -> dict[str, Any]:
                if self.cluster is not None:
                    assert self.cluster.requests is not None
                    return await in_cluster(self.cluster.requests, req)
                assert self.local is not None
                return await alone(req, self.local)

            return handler

        def cluster_of(api: Api, name: str) -> ClusterNode:
            """This server's cluster node; UNSUPPORTED_API for a server alone."""
            if self.cluster is None:
                raise ApiError(
                    ErrorCode.UNSUPPORTED_API,
                    f"{name}: this server is not a member of a cluster",
                    {"api": int(api)},
                )
            return self.cluster

        async def report_leader(req: dict[str, Any]) -> dict[str, Any]:
            elections = cluster_of(Api.REPORT_LEADER, "ReportLeader").elections
            if "reports" in req:  # a batch (spec/protocol.md, api 9)
                return {"answers": await elections.report_many(parse_reports(req))}
            return await elections.report(*parse_report(req))

        async def rebalance(req: dict[str, Any]) -> dict[str, Any]:
            requests = cluster_of(Api.REBALANCE_LEADERS, "RebalanceLeaders").requests
            assert requests is not None
            return await requests.rebalance_leaders(req)

        async def offset_for_epoch(req: dict[str, Any]) -> dict[str, Any]:
            return offset_for_leader_epoch(self.streams, req)

        async def describe(req: dict[str, Any]) -> dict[str, Any]:
            return json_api.describe_stream(req, self.streams, self.is_down)

        async def offsets(req: dict[str, Any]) -> dict[str, Any]:
            return json_api.list_offsets(req, self.streams)

        async def purge(req: dict[str, Any]) -> dict[str, Any]:
            return await purge_partition(req, self.streams)

        async def update(req: dict[str, Any]) -> dict[str, Any]:
            if self.cluster is not None:
                assert self.cluster.requests is not None
                return await self.cluster.requests.update_stream(req)
            return await update_stream(req, self.streams, self.live_settings)

        return {
            Api.HELLO: hello,
            Api.PURGE_STREAM: purge,
            Api.UPDATE_STREAM: update,
            Api.METADATA: metadata,
            # (lambdas: a server alone imports no cluster module, not even for a method)
            Api.CREATE_STREAM: by_mode(lambda c, req: c.create_stream(req), json_api.create_stream),
            Api.DELETE_STREAM: by_mode(lambda c, req: c.delete_stream(req), json_api.delete_stream),
            Api.DESCRIBE_STREAM: describe,
            Api.LIST_OFFSETS: offsets,
            Api.REPORT_LEADER: report_leader,
            Api.REBALANCE_LEADERS: rebalance,
            Api.OFFSET_FOR_LEADER_EPOCH: offset_for_epoch,
        }

    def produce_now(
        self, correlation_id: int, body: bytes, later: Callable[[bytes], None]
    ) -> tuple[bytes, Callable[[], Awaitable[None]] | None] | None:
        """A Produce request answered with no await, from its connection's reader
        callback (:meth:`OneProduce.serve_now`): its response frame and after-work;
        None, nothing done: :meth:`handle` answers it in its task (shutting down, a
        screened request, anything but the common request). An empty frame: the frame
        goes to ``later`` (once), from the commit of its ALL ack (:meth:`_answer_later`)."""
        security = self.security
        if self.shutting_down or (security is not None and security.screens(_PRODUCE)):
            return None
        started = time.perf_counter()
        try:
            served = self.produce.one.serve_now(
                body, partial(self._answer_later, later, correlation_id, started)
            )
        except Exception as exc:  # raised after its append: answered as handle's
            served = self._error_reply(Frame(_PRODUCE, 0, correlation_id, body), exc).data, None
        else:
            if served is None:
                return None
            if not served[0]:  # (answered by its commit: _answer_later)
                return served
            served = (
                encode_frame(_PRODUCE, correlation_id, served[0], flags=FLAG_RESPONSE),
                served[1],
            )
        observe = self.observe
        if observe is not None:
            observe(_PRODUCE, served[0], time.perf_counter() - started)
        return served

    def _answer_later(
        self, later: Callable[[bytes], None], correlation_id: int, started: float, body: bytes
    ) -> None:
        """The answer of a Produce request :meth:`produce_now` left to its commit (a
        ``functools.partial`` per request: no Python frame to build one)."""
        frame = encode_frame(_PRODUCE, correlation_id, body, flags=FLAG_RESPONSE)
        observe = self.observe
        if observe is not None:
            observe(_PRODUCE, frame, time.perf_counter() - started)
        later(frame)

    async def _produce(self, frame: Frame, head: ProduceHead | None) -> Reply:
        # Each request runs in a plain asyncio task of its own (AcceptedConnection).
        write_now = ANSWER_NOW.get()
        answer_now = (
            None
            if write_now is None
            else partial(_answer_now, write_now, frame.api, frame.correlation_id)
        )
        body, after = await self.produce.produce_then(
            frame.body, head, own_task=True, answer_now=answer_now
        )
        if hops.ENABLED:
            hops.mark("produce.resumed")  # the request's task, after its commit
        if not body:  # written already (AnswerNow, or the one-step path's write_now)
            return _SENT if after is None else Reply(b"", after=after, sent=True)
        return Reply(
            encode_frame(frame.api, frame.correlation_id, body, flags=FLAG_RESPONSE), after=after
        )

    async def _fetch(self, frame: Frame) -> Reply:
        req = decode_fetch_request(frame.body)
        if req.replica_id < 0:
            self.consumer_positions[(req.stream, req.partition)] = req.offset
        return _fetch_reply(frame, await fetch(self.streams, self.config.limits, req))

    async def _fetch_stream(self, frame: Frame) -> Reply:
        req = decode_fetch_stream_request(frame.body)
        stream = FetchStream.open(self.streams, self.config.limits, req)
        control = stream_control.CURRENT.get()
        if control is not None:  # Cancel/FetchStreamCredit on its connection end/top it up
            control.attach(stream.cancel, stream.grant)
        write_now = ANSWER_NOW.get()
        if write_now is not None:  # tailing answers from the commit's turn (next_tail)
            stream.push = partial(self._push_stream_answer, write_now, stream)
        return await self._fetch_stream_reply(frame, stream, first=True)

    async def _fetch_stream_reply(
        self, frame: Frame, stream: FetchStream, *, first: bool = False
    ) -> Reply:
        """The next reply of a FetchStream request; it has the "more" flag and a ``then``
        unless it is the last (the first one's errors go through :meth:`handle`)."""
        req = stream.request
        self.consumer_positions[(req.stream, req.partition)] = stream.offset
        try:
            if self.shutting_down:
                raise ApiError(ErrorCode.SHUTTING_DOWN, "server is shutting down")
            if not first:  # a tailing consumer's answer in one step (else None)
                tail = await stream.next_tail(frame.api, frame.correlation_id)
                if tail is not None:
                    if not tail[1]:
                        return Reply(tail[0])
                    return Reply(tail[0], then=partial(self._fetch_stream_reply, frame, stream))
            answer, more = await stream.next_answer()
        except Exception as exc:
            if first:
                raise
            return self._error_reply(frame, exc)
        if not more:
            return _fetch_reply(frame, answer)
        return _fetch_reply(frame, answer, partial(self._fetch_stream_reply, frame, stream))

    def _push_stream_answer(
        self, write_now: Callable[[bytes], bool], stream: FetchStream, frame: bytes
    ) -> bool:
        """A FetchStream answer written from the turn that moved the HW (as
        :meth:`_fetch_stream_reply` would write it, its checks first): False if not now."""
        if self.shutting_down:
            return False
        req = stream.request
        self.consumer_positions[(req.stream, req.partition)] = stream.offset
        return write_now(frame)

    async def _replica_fetch(self, frame: Frame) -> Reply:
        if self.cluster is None:
            raise ApiError(
                ErrorCode.UNSUPPORTED_API,
                "ReplicaFetch: this server is not a member of a cluster",
                {"api": int(Api.REPLICA_FETCH)},
            )
        req = decode_replica_fetch_request(frame.body)
        held = HOLD.get()  # its wait with no task, a lone partition's answer from a callback
        reply = await replica_fetch(
            self.streams,
            self.config.limits,
            self.session_wakers,
            self.leader_sessions,
            req,
            None if held is None else partial(_replica_answer_now, held.write_now, frame),
            None if held is None else _HeldFetch(self, frame, held),
        )
        if reply.sent:
            return HELD_REPLY if reply is HELD else _SENT
        return self._replica_reply(frame, reply)

    def _replica_reply(self, frame: Frame, reply: ReplicaFetchReply) -> Reply:
        """The Reply of a ReplicaFetch answer (``reply`` not sent)."""
        # The last answer's records, which end the frame, go from their files (sendfile);
        # the rest is joined once (records read and joined copied them twice, and the
        # records of the other answers are still copied so).
        last = reply.last_records
        try:
            last_len = None if last is None else last.length
            parts = replica_fetch_response_parts(
                reply.answers, last_records_len=last_len, flags=reply.flags
            )
            head = encode_frame_header(
                frame.api,
                frame.correlation_id,
                sum(map(len, parts)) + (last_len or 0),
                flags=FLAG_RESPONSE,
            )
        except BaseException:
            if last is not None:
                last.close()
            raise
        parts.insert(0, head)
        return Reply(b"".join(parts), records=last)


def _fetch_reply(
    frame: Frame, answer: FetchAnswer, then: Callable[[], Awaitable[Reply]] | None = None
) -> Reply:
    """The reply of a Fetch answer (with ``then``: a FetchStream answer more follow)."""
    records_len = answer.records_len
    head = encode_fetch_response_header(
        answer.error_code, answer.hw, answer.log_start, answer.leo, records_len
    )
    frame_head = encode_frame_header(
        frame.api,
        frame.correlation_id,
        FETCH_RESPONSE_HEADER_SIZE + records_len,
        flags=FLAG_RESPONSE if then is None else FLAG_RESPONSE | FLAG_MORE,
    )
    return Reply(frame_head + head, records=answer.records, then=then)


def _answer_now(
    write_now: Callable[[bytes], bool], api: int, correlation_id: int, body: bytes
) -> bool:
    """A Produce request's response body framed and written now (``write_now``: its
    connection's :meth:`~jetserver.protocol.connection.AcceptedConnection.write_now`)."""
    return write_now(encode_frame(api, correlation_id, body, flags=FLAG_RESPONSE))


@attrs.frozen
class _HeldFetch:
    """The broker's :class:`HeldFetch` of a ReplicaFetch request held by its connection."""

    dispatcher: Dispatcher
    frame: Frame
    held: HeldRequest

    def hold(self, cancel: Callable[[], None]) -> None:
        self.held.hold(cancel)

    def answered(self) -> None:
        self.held.answered()

    def resume(self, rest: Callable[[], Awaitable[ReplicaFetchReply]]) -> None:
        self.held.resume(self._reply(rest))

    async def _reply(self, rest: Callable[[], Awaitable[ReplicaFetchReply]]) -> Reply:
        try:
            reply = await rest()
        except Exception as exc:
            return self.dispatcher._error_reply(self.frame, exc)
        return _SENT if reply.sent else self.dispatcher._replica_reply(self.frame, reply)


def _replica_answer_now(
    write_now: Callable[[bytes], bool], frame: Frame, reply: ReplicaFetchReply
) -> bool:
    """A ReplicaFetch reply (its records in memory) framed and written now."""
    body = b"".join(replica_fetch_response_parts(reply.answers, flags=reply.flags))
    return _answer_now(write_now, frame.api, frame.correlation_id, body)
