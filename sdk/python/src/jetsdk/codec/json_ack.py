"""JSON acks: what a plain NATS request (no envelope, a reply subject) gets back.

A client that has no jet library reads them with any JSON parser, as it reads JetStream's
PubAck (spec/acks.md, "JSON acks for plain requests")::

    {"stream":"orders","partition":0,"offset":18}
    {"stream":"orders","partition":0,"offset":18,"duplicate":true}
    {"stream":"orders","partition":0,"error":{"code":10,"name":"MESSAGE_TOO_LARGE","description":"..."}}

Keys in this order, no spaces (orjson's compact form); ``duplicate`` only when true. A
WRONG_EXPECTED_KEY_OFFSET error names the key's current offset (-1: absent) as
``"key_offset"``, after ``description``.
"""

from __future__ import annotations

from typing import Any

import orjson

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.messages import decode_json


def encode_json_ack(
    stream: str, partition: int, offset: int, error_code: int = 0, error_message: str = ""
) -> bytes:
    """The JSON ack of one message (``error_code`` 0: success; DUPLICATE_SEQUENCE: a
    success marked ``"duplicate": true``)."""
    body: dict[str, Any] = {"stream": stream, "partition": partition}
    if error_code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE):
        body["offset"] = offset
        if error_code == ErrorCode.DUPLICATE_SEQUENCE:
            body["duplicate"] = True
    else:
        body["error"] = {
            "code": int(error_code),
            "name": _name(error_code),
            "description": error_message,
        }
        if error_code == ErrorCode.WRONG_EXPECTED_KEY_OFFSET:
            body["error"]["key_offset"] = offset
    return orjson.dumps(body)


def decode_json_ack(data: bytes) -> tuple[str, int, int, int, str]:
    """``(stream, partition, offset, error_code, error_message)`` of a JSON ack (offset -1
    for an error but WRONG_EXPECTED_KEY_OFFSET, whose offset is its ``key_offset``; a
    duplicate is DUPLICATE_SEQUENCE with its offset).

    Raises:
        CodecError: not a JSON ack (not a JSON object: as :func:`decode_json`).
    """
    obj = decode_json(data)
    stream, partition = obj.get("stream"), obj.get("partition")
    if not isinstance(stream, str) or not isinstance(partition, int):
        raise CodecError("a JSON ack has a string 'stream' and an integer 'partition'")
    error = obj.get("error")
    if error is not None:
        if not isinstance(error, dict) or not isinstance(error.get("code"), int):
            raise CodecError("a JSON ack's 'error' has an integer 'code'")
        key_offset = error.get("key_offset", -1)
        at = key_offset if isinstance(key_offset, int) else -1
        return stream, partition, at, error["code"], str(error.get("description", ""))
    offset = obj.get("offset")
    if not isinstance(offset, int):
        raise CodecError("a JSON ack has an integer 'offset' or an 'error'")
    code = ErrorCode.DUPLICATE_SEQUENCE if obj.get("duplicate") is True else ErrorCode.NONE
    return stream, partition, offset, int(code), ""


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return "UNKNOWN"
