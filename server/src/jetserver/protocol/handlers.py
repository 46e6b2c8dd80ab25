"""Request dispatch: one frame in, one :class:`Reply` out (never raises).

Errors are converted here, at the single inbound boundary: ApiError becomes an error frame
with its code; a body that does not decode becomes MALFORMED_FRAME and closes the
connection; anything unexpected becomes UNKNOWN (logged with its traceback).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import FLAG_RESPONSE, Api, Frame, encode_frame, encode_frame_header
from jetsdk.codec.messages import (
    FETCH_RESPONSE_HEADER_SIZE,
    decode_fetch_request,
    decode_json,
    decode_produce_request,
    encode_fetch_response_header,
    encode_json,
    encode_produce_response,
)
from jetserver.broker.fetch import fetch
from jetserver.broker.produce import ProduceService
from jetserver.broker.streams import StreamManager
from jetserver.config import ServerConfig
from jetserver.errors import ApiError
from jetserver.logs import fields
from jetserver.protocol import json_api
from jetserver.protocol.connection import Reply, error_reply
from jetserver.storage import StorageError

log = logging.getLogger(__name__)


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

    def servers(self) -> list[dict[str, str]]:
        """The Metadata ``servers`` list (just this server until clustering)."""
        return [{"id": self.config.server.id, "address": self.address}]

    async def handle(self, frame: Frame) -> Reply:
        """Answer one request frame."""
        api, cid = frame.api, frame.correlation_id
        try:
            if self.shutting_down:
                raise ApiError(ErrorCode.SHUTTING_DOWN, "server is shutting down")
            if api == Api.PRODUCE:
                return await self._produce(frame)
            if api == Api.FETCH:
                return await self._fetch(frame)
            json_handler = self._json_handlers().get(api)
            if json_handler is None:
                raise ApiError(ErrorCode.UNSUPPORTED_API, f"unknown API key {api}", {"api": api})
            request = decode_json(frame.body)
            response = await json_handler(request)
            return Reply(encode_frame(api, cid, encode_json(response), flags=FLAG_RESPONSE))
        except ApiError as exc:
            return error_reply(api, cid, exc.code, exc.message, exc.details)
        except StorageError as exc:
            details = {"retriable": exc.retriable}
            return error_reply(api, cid, exc.code, f"storage: {exc}", details)
        except CodecError as exc:
            return error_reply(
                api,
                cid,
                ErrorCode.MALFORMED_FRAME,
                f"request body does not decode: {exc}",
                close=True,
            )
        except Exception as exc:
            log.exception("request failed", extra=fields(api=api))
            return error_reply(api, cid, ErrorCode.UNKNOWN, f"internal error: {exc!r}")

    def _json_handlers(self) -> dict[int, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]]:
        async def hello(req: dict[str, Any]) -> dict[str, Any]:
            return json_api.hello(req, self.config)

        async def metadata(req: dict[str, Any]) -> dict[str, Any]:
            return json_api.metadata(req, self.streams, self.servers())

        async def create(req: dict[str, Any]) -> dict[str, Any]:
            return await json_api.create_stream(req, self.streams)

        async def delete(req: dict[str, Any]) -> dict[str, Any]:
            return await json_api.delete_stream(req, self.streams)

        async def describe(req: dict[str, Any]) -> dict[str, Any]:
            return json_api.describe_stream(req, self.streams)

        async def offsets(req: dict[str, Any]) -> dict[str, Any]:
            return json_api.list_offsets(req, self.streams)

        return {
            Api.HELLO: hello,
            Api.METADATA: metadata,
            Api.CREATE_STREAM: create,
            Api.DELETE_STREAM: delete,
            Api.DESCRIBE_STREAM: describe,
            Api.LIST_OFFSETS: offsets,
        }

    async def _produce(self, frame: Frame) -> Reply:
        req = decode_produce_request(frame.body)
        results = await self.produce.produce(req)
        body = encode_produce_response(results)
        return Reply(encode_frame(frame.api, frame.correlation_id, body, flags=FLAG_RESPONSE))

    async def _fetch(self, frame: Frame) -> Reply:
        req = decode_fetch_request(frame.body)
        answer = await fetch(self.streams, self.config.limits, req)
        head = encode_fetch_response_header(
            answer.error_code, answer.hw, answer.log_start, answer.leo, answer.records_len
        )
        frame_head = encode_frame_header(
            frame.api,
            frame.correlation_id,
            FETCH_RESPONSE_HEADER_SIZE + answer.records_len,
            flags=FLAG_RESPONSE,
        )
        return Reply(frame_head + head, records=answer.records)
