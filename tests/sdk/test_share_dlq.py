"""The dead-letter stream as a first-class stream (spec/share-groups.md §6), on a real
3-server `jet dev`: created with the share log's replication factor, a pre-created stream with
other settings used as it is, a compacted one refused naming ``compact``, and settings
choosable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from jetsdk import Client, InvalidArgument, Producer, ShareConsumer
from support.jet_dev import JetDev
from support.names import unique


@pytest.fixture(scope="module")
def dev3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JetDev]:
    with JetDev.start(Path(tmp_path_factory.mktemp("share-dlq")) / "data", servers=3) as dev:
        yield dev


async def reject_one(client: Client, stream: str, group: str, **options: object) -> None:
    """One message, rejected: the dead letter is written and settled."""
    await client.create_stream(stream, stream, replication_factor=3)
    async with Producer(client, stream) as producer:
        await producer.send_soon(b"x")
    async with ShareConsumer(client, stream, group=group, **options) as consumer:  # type: ignore[arg-type]
        msg = await consumer.next(timeout=30)
        assert msg is not None
        msg.reject()
        with anyio.fail_after(30):
            while consumer.state.partition(stream, 0).dead_total < 1:
                await consumer.flush()
                await anyio.sleep(0.05)


def test_created_with_the_share_logs_replication_factor(dev3: JetDev) -> None:
    stream, group = unique("d"), unique("g")

    async def main() -> tuple[int, int, int]:
        async with Client(dev3.servers) as client:
            await reject_one(client, stream, group)
            log = await client.stream_info(f"__share.{group}", refresh=True)
            dlq = await client.stream_info(f"{group}-dlq", refresh=True)
            end = (await client.list_offsets(f"{group}-dlq", 0, "latest")).hw
            return log.replication_factor, dlq.replication_factor, end

    assert anyio.run(main) == (3, 3, 1)


def test_a_pre_created_stream_with_other_settings_is_used(dev3: JetDev) -> None:
    """RF 3, min_isr 2, a retention and three partitions: used as it is (it was refused with
    StreamExists naming replication_factor and min_isr)."""
    stream, group, dlq = unique("d"), unique("g"), unique("dlq")

    async def main() -> int:
        async with Client(dev3.servers) as client:
            await client.create_stream(
                dlq, replication_factor=3, min_isr=2, partitions=3, retention_max_age=3600.0
            )
            await reject_one(client, stream, group, dead_letter_stream=dlq)
            return (await client.list_offsets(dlq, 0, "latest")).hw

    assert anyio.run(main) == 1


def test_a_compacted_stream_is_refused_naming_compact(dev3: JetDev) -> None:
    stream, group, dlq = unique("d"), unique("g"), unique("dlq")

    async def main() -> None:
        async with Client(dev3.servers) as client:
            await client.create_stream(stream, stream)
            await client.create_stream(dlq, compact=True)
            with pytest.raises(InvalidArgument) as caught:
                async with ShareConsumer(client, stream, group=group, dead_letter_stream=dlq):
                    pass
            assert caught.value.field == "compact"
            assert "compact" in str(caught.value)

    anyio.run(main)


def test_settings_are_choosable(dev3: JetDev) -> None:
    stream, group, dlq = unique("d"), unique("g"), unique("dlq")

    async def main() -> tuple[int, object]:
        async with Client(dev3.servers) as client:
            await reject_one(
                client,
                stream,
                group,
                dead_letter_stream=dlq,
                dead_letter_options={"replication_factor": 2, "retention_max_age": 7200.0},
            )
            info = await client.stream_info(dlq, refresh=True)
            return info.replication_factor, info.config.get("retention_max_age_s")

    rf, age = anyio.run(main)
    assert rf == 2
    assert age == 7200.0


def test_bad_options_are_refused_before_anything_is_created() -> None:
    with pytest.raises(InvalidArgument) as caught:
        ShareConsumer(None, "s", group="g", dead_letter_options={"replicas": 3})  # type: ignore[arg-type]
    assert caught.value.field == "replicas"
    with pytest.raises(InvalidArgument) as caught:
        ShareConsumer(None, "s", group="g", dead_letter_options={"compact": True})  # type: ignore[arg-type]
    assert caught.value.field == "compact"
