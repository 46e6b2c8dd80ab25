"""A small in-memory jet cluster speaking the real client protocol, for SDK unit tests.

It implements just enough of spec/protocol.md (Hello, Metadata, CreateStream,
DeleteStream, DescribeStream, ListOffsets, Produce, Fetch with long polls) over
:class:`jetsdk.memory.MemoryNetwork`, with knobs to move leaders and break connections,
so SDK logic (routing, retries, batching, prefetch, seeks) is tested fast and
deterministically under both anyio backends. Integration tests use the real server.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import attrs

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.fetch_messages import decode_fetch_request, encode_fetch_response_header
from jetsdk.codec.frames import Api, Frame
from jetsdk.codec.messages import (
    ProduceResult,
    decode_produce_request,
    encode_error,
    encode_produce_response,
)
from jetsdk.codec.produce_many import (
    ProduceSection,
    decode_produce_many_request,
    encode_produce_many_response,
)
from jetsdk.codec.record import encode_body, frame_body
from jetsdk.memory import FramePeer, MemoryNetwork


@attrs.define
class FakePartition:
    subject: str
    leader: str
    records: list[bytes] = attrs.field(factory=list)
    log_start: int = 0
    grew: anyio.Event = attrs.field(factory=anyio.Event)
    parked: anyio.Event = attrs.field(factory=anyio.Event)
    """Set when a Fetch waits for records here (a long poll reached the server)."""
    sequences: dict[tuple[int, int], tuple[int, int]] = attrs.field(factory=dict)
    """(producer id, sequence) -> (offset, timestamp) of idempotent messages stored."""

    @property
    def hw(self) -> int:
        return self.log_start + len(self.records)


@attrs.define
class FakeStream:
    name: str
    subject: str
    partitions: list[FakePartition]


@attrs.define
class FakeCluster:
    """Servers ``s1``, ``s2``, ... at ``s1:9292``, ... sharing one state."""

    network: MemoryNetwork
    server_ids: list[str]
    streams: dict[str, FakeStream] = attrs.field(factory=dict)
    requests: list[tuple[str, int]] = attrs.field(factory=list)
    produce_batches: list[int] = attrs.field(factory=list)
    fail_next_produce: list[ErrorCode] = attrs.field(factory=list)
    fail_next_results: list[tuple[ErrorCode, bool]] = attrs.field(factory=list)
    """Per Produce request: (code, stored): the second half of its messages is answered
    ``code`` (stored first if ``stored``: an outcome the client cannot know)."""
    max_message_bytes: int = 1024 * 1024
    produce_many: bool = False
    """Serve ProduceMany (api 17) and list it in Hello (off: a server from before it)."""
    produce_many_sections: list[int] = attrs.field(factory=list)
    """Sections of each ProduceMany request served."""

    @classmethod
    def start(cls, network: MemoryNetwork, servers: int = 1) -> FakeCluster:
        cluster = cls(network, [f"s{i + 1}" for i in range(servers)])
        for sid in cluster.server_ids:
            cluster.listen(sid)
        return cluster

    def listen(self, sid: str) -> None:
        async def handler(peer: FramePeer) -> None:
            await self.serve(sid, peer)

        self.network.listen(f"{sid}:9292", handler)

    @property
    def addresses(self) -> list[str]:
        return [f"{sid}:9292" for sid in self.server_ids]

    def add_stream(self, name: str, partitions: int = 1, leader: str = "s1") -> FakeStream:
        parts = [
            FakePartition(name if p == 0 else f"{name}.{p}", leader) for p in range(partitions)
        ]
        stream = self.streams[name] = FakeStream(name, name, parts)
        return stream

    def append(self, stream: str, partition: int, value: bytes, key: bytes | None = None) -> int:
        part = self.streams[stream].partitions[partition]
        offset = part.hw
        body = encode_body(value, key=key, subject=part.subject)
        part.records.append(frame_body(offset, time.time_ns(), 0, body))
        part.grew.set()
        part.grew = anyio.Event()
        return offset

    def truncate_front(self, stream: str, partition: int, new_start: int) -> None:
        part = self.streams[stream].partitions[partition]
        drop = new_start - part.log_start
        del part.records[:drop]
        part.log_start = new_start

    # -- protocol -------------------------------------------------------------------------

    def _stream_json(self, s: FakeStream, describe: bool = False) -> dict[str, Any]:
        parts = []
        for i, p in enumerate(s.partitions):
            info: dict[str, Any] = {
                "partition": i,
                "subject": p.subject,
                "leader": p.leader,
                "replicas": [p.leader],
                "isr": [p.leader],
                "leader_epoch": 0,
            }
            if describe:
                info.update(hw=p.hw, leo=p.hw, log_start=p.log_start, size_bytes=0, segments=1)
            parts.append(info)
        return {
            "name": s.name,
            "subject": s.subject,
            "group": None,
            "partitions": parts,
            "replication_factor": 1,
            "compact": False,
            "config": {},
            "created_ns": 0,
        }

    async def serve(self, sid: str, peer: FramePeer) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                frame = await peer.receive()
                if frame is None:
                    tg.cancel_scope.cancel()
                    return
                self.requests.append((sid, frame.api))
                tg.start_soon(self._handle, sid, peer, frame)

    async def _handle(self, sid: str, peer: FramePeer, frame: Frame) -> None:
        api = frame.api
        if api == Api.HELLO:
            await peer.respond_json(
                frame,
                {
                    "protocol": 1,
                    "server_id": sid,
                    "version": "fake",
                    "max_frame_bytes": 16 * 1024 * 1024,
                    "max_message_bytes": self.max_message_bytes,
                    **({"apis": list(range(18))} if self.produce_many else {}),
                },
            )
        elif api == Api.METADATA:
            await peer.respond_json(
                frame,
                {
                    "servers": [{"id": s, "address": f"{s}:9292"} for s in self.server_ids],
                    "streams": [self._stream_json(s) for s in self.streams.values()],
                },
            )
        elif api == Api.CREATE_STREAM:
            req = peer.json_body(frame)
            name = req["name"]
            created = name not in self.streams
            if created:
                self.add_stream(name, req.get("partitions", 1))
            await peer.respond_json(
                frame, {"created": created, "stream": self._stream_json(self.streams[name])}
            )
        elif api in (Api.DELETE_STREAM, Api.DESCRIBE_STREAM):
            name = peer.json_body(frame)["name"]
            if name not in self.streams:
                await peer.respond_error(
                    frame, ErrorCode.STREAM_NOT_FOUND, "no stream", {"stream": name}
                )
            elif api == Api.DELETE_STREAM:
                del self.streams[name]
                await peer.respond_json(frame, {"deleted": True})
            else:
                await peer.respond_json(frame, self._stream_json(self.streams[name], True))
        elif api == Api.LIST_OFFSETS:
            req = peer.json_body(frame)
            part = await self._partition(sid, peer, frame, req["stream"], req["partition"])
            if part is None:
                return
            offset = part.log_start if req["position"] == "earliest" else part.hw
            await peer.respond_json(
                frame, {"offset": offset, "hw": part.hw, "log_start": part.log_start}
            )
        elif api == Api.PRODUCE:
            code, message, details, body = self._produce(sid, frame.body)
            if code:
                await peer.respond_error(frame, code, message, details)
            else:
                await peer.respond(frame, body)
        elif api == Api.PRODUCE_MANY and self.produce_many:
            sections = []
            for section in decode_produce_many_request(frame.body):
                code, message, details, body = self._produce(sid, section)
                if code:
                    body = encode_error(code, message, details)
                sections.append(ProduceSection(int(code), body))
            self.produce_many_sections.append(len(sections))
            await peer.respond(frame, encode_produce_many_response(sections))
        elif api == Api.FETCH:
            freq = decode_fetch_request(frame.body)
            part = await self._partition(sid, peer, frame, freq.stream, freq.partition)
            if part is None:
                return
            if freq.offset < part.log_start or freq.offset > part.hw:
                head = encode_fetch_response_header(
                    ErrorCode.OFFSET_OUT_OF_RANGE, part.hw, part.log_start, part.hw, 0
                )
                await peer.respond(frame, head)
                return
            if freq.offset == part.hw:
                part.parked.set()
                with anyio.move_on_after(freq.max_wait_ms / 1000):
                    await part.grew.wait()
            chunks: list[bytes] = []
            size = 0
            for raw in part.records[freq.offset - part.log_start :]:
                if chunks and size + len(raw) > freq.max_bytes:
                    break
                chunks.append(raw)
                size += len(raw)
            data = b"".join(chunks)
            head = encode_fetch_response_header(0, part.hw, part.log_start, part.hw, len(data))
            await peer.respond(frame, head + data)
        else:
            await peer.respond_error(frame, ErrorCode.UNSUPPORTED_API, "no")

    def _produce(self, sid: str, body: bytes) -> tuple[ErrorCode, str, dict[str, Any], bytes]:
        """A Produce body served: (NONE, "", {}, the response body) or (the error code,
        its message, its details, b"")."""
        preq = decode_produce_request(body)
        part_or_error = self._partition_or_error(sid, preq.stream, preq.partition)
        if not isinstance(part_or_error, FakePartition):
            return part_or_error
        part = part_or_error
        if self.fail_next_produce:
            return self.fail_next_produce.pop(0), "injected", {}, b""
        self.produce_batches.append(len(preq.messages))
        failing = self.fail_next_results.pop(0) if self.fail_next_results else None
        results = []
        for i, m in enumerate(preq.messages):
            if len(m.value) > self.max_message_bytes:
                results.append(ProduceResult(ErrorCode.MESSAGE_TOO_LARGE, -1, -1))
                continue
            failed = failing is not None and i >= len(preq.messages) // 2
            if failed and failing is not None and not failing[1]:
                results.append(ProduceResult(failing[0], -1, -1))
                continue
            key = (preq.producer_id, preq.base_seq + i) if preq.producer_id else None
            if key is not None and key in part.sequences:
                stored_at, stamp = part.sequences[key]
                results.append(ProduceResult(ErrorCode.DUPLICATE_SEQUENCE, stored_at, stamp))
                continue
            offset = part.hw
            ts = time.time_ns()
            record = encode_body(
                m.value, key=m.key, subject=m.subject or part.subject, headers=m.headers
            )
            part.records.append(frame_body(offset, ts, 0, record))
            if key is not None:
                part.sequences[key] = (offset, ts)
            if failed and failing is not None:
                results.append(ProduceResult(failing[0], -1, -1))
            elif preq.ack_policy == AckPolicy.NONE:
                results.append(ProduceResult(0, -1, -1))
            else:
                results.append(ProduceResult(0, offset, ts))
        part.grew.set()
        part.grew = anyio.Event()
        return ErrorCode.NONE, "", {}, encode_produce_response(results)

    def _partition_or_error(
        self, sid: str, stream: str, partition: int
    ) -> FakePartition | tuple[ErrorCode, str, dict[str, Any], bytes]:
        s = self.streams.get(stream)
        if s is None:
            return ErrorCode.STREAM_NOT_FOUND, "no stream", {"stream": stream}, b""
        if not 0 <= partition < len(s.partitions):
            return ErrorCode.PARTITION_NOT_FOUND, "no partition", {}, b""
        part = s.partitions[partition]
        if part.leader != sid:
            return ErrorCode.NOT_LEADER, "not leader", {"leader": part.leader}, b""
        return part

    async def _partition(
        self, sid: str, peer: FramePeer, frame: Frame, stream: str, partition: int
    ) -> FakePartition | None:
        s = self.streams.get(stream)
        if s is None:
            await peer.respond_error(
                frame, ErrorCode.STREAM_NOT_FOUND, "no stream", {"stream": stream}
            )
            return None
        if not 0 <= partition < len(s.partitions):
            await peer.respond_error(frame, ErrorCode.PARTITION_NOT_FOUND, "no partition")
            return None
        part = s.partitions[partition]
        if part.leader != sid:
            await peer.respond_error(
                frame, ErrorCode.NOT_LEADER, "not leader", {"leader": part.leader}
            )
            return None
        return part
