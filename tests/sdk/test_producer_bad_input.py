"""A bad message fails alone, at ``send_soon``, typed; the producer keeps working (issue 12).

Before, a 100 KB key passed ``send_soon`` and raised a CodecError inside the producer's
background send loop: that send failed with ClientClosed, every later send failed, and
leaving ``async with`` raised an ExceptionGroup holding the raw CodecError.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jetsdk import MessageTooLarge, Producer
from jetsdk.codec.limits import MAX_HEADER_COUNT, MAX_HEADER_NAME_BYTES, MAX_KEY_BYTES
from jetsdk.errors import InvalidArgument

from .helpers import cluster_and_client

pytestmark = pytest.mark.anyio

BAD: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"key": b"k" * (MAX_KEY_BYTES + 1)}, InvalidArgument),
    ({"value": 5}, TypeError),  # bytes(5) would be five zero bytes
    ({"value": "text"}, TypeError),
    ({"key": "text"}, TypeError),
    ({"headers": {"h": 5}}, TypeError),
    ({"headers": {b"h": b"v"}}, TypeError),
    ({"headers": [("h" * (MAX_HEADER_NAME_BYTES + 1), b"v")]}, InvalidArgument),
    ({"headers": [("h", b"v")] * (MAX_HEADER_COUNT + 1)}, InvalidArgument),
    ({"headers": {"\ud800": b"v"}}, InvalidArgument),  # not encodable as UTF-8
    ({"subject": "a b"}, InvalidArgument),
    ({"subject": 7}, TypeError),
    ({"value": b"x" * 2_000_000}, MessageTooLarge),
]


@pytest.mark.parametrize(("kwargs", "error"), BAD)
async def test_a_bad_message_fails_at_send_soon_and_the_producer_goes_on(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        async with Producer(client, "s", linger=0) as producer:
            args = {"value": b"v", **kwargs}
            value = args.pop("value")
            with pytest.raises(error):
                await producer.send_soon(value, **args)
            ack = await producer.send(b"still works", key=b"k", headers={"h": "v"})
        assert ack.offset == 0


_values = st.one_of(
    st.binary(max_size=64),
    st.binary(min_size=MAX_KEY_BYTES, max_size=MAX_KEY_BYTES + 2),
    st.text(max_size=8),
    st.integers(),
    st.none(),
    st.lists(st.integers(0, 255), max_size=4),
)
_headers = st.one_of(
    st.none(),
    st.dictionaries(st.text(max_size=6), st.one_of(st.binary(max_size=8), st.text(max_size=8))),
    st.lists(st.tuples(st.one_of(st.text(max_size=4), st.binary(max_size=4)), _values), max_size=3),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=_values,
    key=_values,
    headers=_headers,
    subject=st.one_of(st.just(""), st.text(max_size=6)),
)
async def test_nothing_passed_to_send_stops_the_producer(
    value: Any, key: Any, headers: Any, subject: Any
) -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        async with Producer(client, "s", linger=0) as producer:
            try:
                handle = await producer.send_soon(value, key, headers, subject=subject)
            except (TypeError, InvalidArgument, MessageTooLarge):
                pass
            else:
                # The server may refuse it (a subject that does not match the stream's).
                with contextlib.suppress(InvalidArgument):
                    await handle
            ack = await producer.send(b"after")
        assert ack.offset >= 0
