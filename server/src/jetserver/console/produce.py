"""``POST /api/records`` (``--allow-writes`` only): produce one message from the console.

Body ``{"stream": S, "value": "text", "key": "text"|null, "headers": [[name, value], ...],
"partition": P|null}`` (texts as UTF-8; no partition: the key's, as every jet client
routes, or round robin). Sent with ack ALL through the console's client; answers
``{"stream", "partition", "offset"}``. Bad input is a 400 that says what is wrong; a
message over the servers' ``max_message_bytes`` too, before anything is sent.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from jetsdk import AckPolicy, Client, Producer
from jetserver.console.http import HttpError


def _text(body: dict[str, Any], name: str, *, required: bool = False) -> bytes | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"'{name}' must be a string")
    return value.encode()


def _headers(body: dict[str, Any]) -> list[tuple[str, bytes]]:
    raw = body.get("headers") or []
    if not isinstance(raw, list):
        raise HttpError(HTTPStatus.BAD_REQUEST, "'headers' must be a list of [name, value]")
    out = []
    for item in raw:
        ok = isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)
        if not ok or not item[0]:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"a header must be [name, value]: {item!r}")
        out.append((item[0], item[1].encode()))
    return out


async def produce_record(client: Client, body: Any) -> dict[str, Any]:
    """Produce the message ``body`` describes (see the module doc)."""
    if not isinstance(body, dict) or not isinstance(body.get("stream"), str):
        raise HttpError(HTTPStatus.BAD_REQUEST, "body must be an object naming a 'stream'")
    stream: str = body["stream"]
    value = _text(body, "value", required=True)
    assert value is not None
    key = _text(body, "key")
    headers = _headers(body)
    partition = body.get("partition")
    info = await client.stream_info(stream, refresh=True)
    if partition is not None and (
        isinstance(partition, bool)
        or not isinstance(partition, int)
        or not 0 <= partition < info.partition_count
    ):
        raise HttpError(
            HTTPStatus.BAD_REQUEST,
            f"'partition' must be empty or 0..{info.partition_count - 1}, not {partition!r}",
        )
    size = len(value) + len(key or b"") + sum(len(n.encode()) + len(v) for n, v in headers)
    if size > client.max_message_bytes:
        raise HttpError(
            HTTPStatus.BAD_REQUEST,
            f"the message is {size} bytes, over max_message_bytes {client.max_message_bytes}",
        )
    async with Producer(client, stream, ack=AckPolicy.ALL, linger=0) as producer:
        ack = await producer.send(value, key, headers, partition=partition)
    return {"stream": stream, "partition": ack.partition, "offset": ack.offset}
