"""A minimal client of the jet protocol for server tests, built only on jetsdk.codec.

It speaks frames over an anyio TCP stream, one request at a time unless ``pipeline`` is
used, and offers typed helpers for every API. Every receive has a timeout.

    async with await RawClient.connect("127.0.0.1:9292") as c:
        await c.create_stream(name="orders", subject="orders")
        results = await c.produce("orders", 0, [ProduceMessage(b"x")])
        header, records = await c.fetch("orders", 0, offset=0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import attrs
from anyio.abc import SocketStream

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.fetch_messages import (
    FetchRequest,
    FetchResponseHeader,
    decode_fetch_response,
    encode_fetch_request,
)
from jetsdk.codec.frames import Api, Frame, FrameDecoder, encode_frame
from jetsdk.codec.messages import (
    ErrorBody,
    ProduceMessage,
    ProduceRequest,
    ProduceResult,
    decode_error,
    decode_json,
    decode_produce_response,
    encode_json,
    encode_produce_request,
)
from jetsdk.codec.record import Record, iter_records

DEFAULT_TIMEOUT_S = 10.0


class ServerError(Exception):
    """An error frame from the server."""

    def __init__(self, error: ErrorBody) -> None:
        super().__init__(f"{error.name}: {error.message}")
        self.error = error
        self.code = error.code


class ConnectionClosed(Exception):
    """The server closed the connection."""


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` -> ``(host, port)``."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


@attrs.define(eq=False)
class RawClient:
    """One protocol connection."""

    stream: SocketStream
    decoder: FrameDecoder = attrs.field(factory=FrameDecoder)
    next_cid: int = 1

    @classmethod
    async def connect(cls, address: str) -> RawClient:
        """Open a connection to ``host:port``."""
        host, port = split_address(address)
        return cls(await anyio.connect_tcp(host, port))

    async def __aenter__(self) -> RawClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stream.aclose()

    # ------------------------------------------------------------------ frames

    async def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (for bad-input tests)."""
        await self.stream.send(data)

    async def recv_frame(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> Frame:
        """The next frame from the server.

        Raises:
            ConnectionClosed: the server closed the connection first.
            TimeoutError: nothing within ``timeout_s``.
        """
        with anyio.fail_after(timeout_s):
            while True:
                frame = self.decoder.next_frame()
                if frame is not None:
                    return frame
                try:
                    data = await self.stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
                    raise ConnectionClosed from None
                self.decoder.feed(data)

    async def wait_closed(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Frame]:
        """Read until the server closes the connection; return the frames received."""
        frames: list[Frame] = []
        with anyio.fail_after(timeout_s):
            while True:
                try:
                    frames.append(await self.recv_frame(timeout_s))
                except ConnectionClosed:
                    return frames

    def _cid(self) -> int:
        cid = self.next_cid
        self.next_cid += 1
        return cid

    async def request(self, api: int, body: bytes, timeout_s: float = DEFAULT_TIMEOUT_S) -> Frame:
        """Send one request and return its response frame (error frames raise ServerError)."""
        cid = self._cid()
        await self.stream.send(encode_frame(api, cid, body))
        frame = await self.recv_frame(timeout_s)
        assert frame.correlation_id == cid, (frame.correlation_id, cid)
        if frame.is_error:
            raise ServerError(decode_error(frame.body))
        return frame

    async def pipeline(
        self, requests: Sequence[tuple[int, bytes]], timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> dict[int, Frame]:
        """Send every request at once; return the responses by correlation id."""
        cids = [self._cid() for _ in requests]
        await self.stream.send(
            b"".join(encode_frame(api, cid, body) for cid, (api, body) in zip(cids, requests))
        )
        out: dict[int, Frame] = {}
        while len(out) < len(cids):
            frame = await self.recv_frame(timeout_s)
            out[frame.correlation_id] = frame
        return out

    async def call_json(
        self, api: int, body: dict[str, Any], timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> dict[str, Any]:
        """A JSON API call."""
        frame = await self.request(api, encode_json(body), timeout_s)
        return decode_json(frame.body)

    # ------------------------------------------------------------------ APIs

    async def hello(self) -> dict[str, Any]:
        """Hello."""
        return await self.call_json(Api.HELLO, {"protocol": 1, "client": "raw-test"})

    async def create_stream(self, **fields: Any) -> dict[str, Any]:
        """CreateStream with the given fields."""
        return await self.call_json(Api.CREATE_STREAM, fields)

    async def delete_stream(self, name: str) -> dict[str, Any]:
        """DeleteStream."""
        return await self.call_json(Api.DELETE_STREAM, {"name": name})

    async def describe(self, name: str) -> dict[str, Any]:
        """DescribeStream."""
        return await self.call_json(Api.DESCRIBE_STREAM, {"name": name})

    async def metadata(self, streams: list[str] | None = None) -> dict[str, Any]:
        """Metadata."""
        return await self.call_json(Api.METADATA, {"streams": streams})

    async def list_offsets(
        self, stream: str, partition: int = 0, position: str = "latest", timestamp_ns: int = 0
    ) -> dict[str, Any]:
        """ListOffsets."""
        return await self.call_json(
            Api.LIST_OFFSETS,
            {
                "stream": stream,
                "partition": partition,
                "position": position,
                "timestamp_ns": timestamp_ns,
            },
        )

    async def produce(
        self,
        stream: str,
        partition: int,
        messages: Sequence[ProduceMessage],
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        timeout_ms: int = 5000,
        producer_id: int | None = None,
        base_seq: int = 0,
        sequence_start: bool = False,
    ) -> list[ProduceResult]:
        """Produce; one result per message (``sequence_start``: flags bit 1)."""
        req = ProduceRequest(
            stream=stream,
            partition=partition,
            ack_policy=ack_policy,
            timeout_ms=timeout_ms,
            messages=tuple(messages),
            producer_id=producer_id,
            base_seq=base_seq,
            sequence_start=sequence_start,
        )
        frame = await self.request(
            Api.PRODUCE, encode_produce_request(req), timeout_ms / 1000 + DEFAULT_TIMEOUT_S
        )
        return decode_produce_response(frame.body)

    async def fetch(
        self,
        stream: str,
        partition: int = 0,
        offset: int = 0,
        *,
        max_bytes: int = 1 << 20,
        max_wait_ms: int = 0,
    ) -> tuple[FetchResponseHeader, list[Record]]:
        """Fetch; returns the header and the whole records."""
        req = FetchRequest(stream, partition, offset, max_bytes, max_wait_ms)
        frame = await self.request(
            Api.FETCH, encode_fetch_request(req), max_wait_ms / 1000 + DEFAULT_TIMEOUT_S
        )
        header, records = decode_fetch_response(frame.body)
        return header, list(iter_records(records))

    async def fetch_all(
        self, stream: str, partition: int = 0, offset: int = 0, *, upto: int | None = None
    ) -> list[Record]:
        """Every committed record from ``offset`` to the HW (or to ``upto``)."""
        out: list[Record] = []
        while True:
            header, records = await self.fetch(stream, partition, offset)
            out.extend(records)
            end = header.hw if upto is None else min(upto, header.hw)
            if not records or records[-1].offset + 1 >= end:
                return [r for r in out if upto is None or r.offset < upto]
            offset = records[-1].offset + 1

    async def collect(
        self, stream: str, partition: int, count: int, *, offset: int = 0, timeout_s: float = 10.0
    ) -> list[Record]:
        """Long-poll until ``count`` records from ``offset`` are committed (or fail after
        ``timeout_s``)."""
        out: list[Record] = []
        with anyio.fail_after(timeout_s):
            while len(out) < count:
                _header, records = await self.fetch(
                    stream, partition, offset, max_wait_ms=int(timeout_s * 1000)
                )
                out.extend(records)
                if records:
                    offset = records[-1].offset + 1
        return out
