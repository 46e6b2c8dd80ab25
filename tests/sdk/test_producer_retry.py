"""Producer retries (issue 4, item 4): messages that fail retriably (leader change, lost
connection, maybe-stored TIMEOUT) are sent again with the same sequences until the
delivery timeout; an idempotent producer stores each message exactly once, in order."""

from __future__ import annotations

import pytest

from jetsdk import Producer
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.record import iter_records
from jetsdk.errors import NotLeader, Timeout

from .helpers import FAST_RETRY, cluster_and_client

pytestmark = pytest.mark.anyio


def _stored_values(cluster: object, stream: str) -> list[bytes]:
    part = cluster.streams[stream].partitions[0]  # type: ignore[attr-defined]
    return [r.value for r in iter_records(b"".join(part.records))]


@pytest.mark.parametrize("stored", [False, True], ids=["not-stored", "maybe-stored"])
@pytest.mark.parametrize("code", [ErrorCode.NOT_LEADER, ErrorCode.TIMEOUT])
async def test_idempotent_per_message_failures_are_resent_once(
    code: ErrorCode, stored: bool
) -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        cluster.fail_next_results.extend([(code, stored)] * 3)
        values = [b"m%03d" % i for i in range(40)]
        async with Producer(
            client, "s", idempotent=True, linger=0.05, max_batch_messages=10
        ) as producer:
            handles = [await producer.send_soon(v) for v in values]
            acks = [await h for h in handles]
        assert producer.retries >= 2, cluster.produce_batches
        assert [a.offset for a in acks] == list(range(40))
        assert _stored_values(cluster, "s") == values


async def test_request_failures_beyond_client_attempts_are_retried() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        cluster.fail_next_produce.extend([ErrorCode.NOT_LEADER] * (FAST_RETRY.attempts + 3))
        async with Producer(client, "s", idempotent=True, linger=0) as producer:
            ack = await producer.send(b"a")
        assert ack.offset == 0
        assert _stored_values(cluster, "s") == [b"a"]


async def test_delivery_timeout_fails_with_the_last_error() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        cluster.fail_next_results.extend([(ErrorCode.NOT_LEADER, False)] * 10_000)
        async with Producer(client, "s", linger=0, delivery_timeout=0.3) as producer:
            # The last error, or Timeout if the deadline cut an attempt short (loaded CI).
            with pytest.raises((NotLeader, Timeout), match="delivery_timeout") as info:
                await producer.send(b"a")
        assert producer.retries > 0, info.value


async def test_timeout_results_are_not_resent_without_idempotence() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        cluster.fail_next_results.append((ErrorCode.TIMEOUT, True))
        async with Producer(client, "s", linger=0.05) as producer:
            first = await producer.send_soon(b"a")
            second = await producer.send_soon(b"b")
            assert (await first).offset == 0
            with pytest.raises(Timeout):
                await second
        assert _stored_values(cluster, "s") == [b"a", b"b"]


def test_delivery_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Producer(object(), "s", delivery_timeout=0)  # type: ignore[arg-type]
