"""Partitioned tables in consumer groups (issue 38 item 4): a group member holds the
partitions of a table co-partitioned with its stream (same keys, same partition count, the
SDK's default partitioner on both), and they move with its assignment::

    prices = Table(client, "prices", partitions=[])        # holds nothing yet
    async with prices, Consumer(
        client, "orders", group="pricing", **co_partitioned(prices, "orders")
    ) as orders:
        async for msg in orders:                             # a stream-table join
            price = prices.get(msg.key)                      # the key's partition is held

``on_assigned`` runs before the member fetches the partitions it got, and returns once the
table holds the same partitions up to their high watermark, so every message of an
assigned partition finds the table's state for its key (as of that moment, then kept up to
date). ``on_revoked`` and ``on_lost`` release them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from jetsdk.errors import InvalidArgument
from jetsdk.group.stream_partition import StreamPartition
from jetsdk.table.table import Table

Callback = Callable[[list[StreamPartition]], Awaitable[None] | None]
"""A consumer's ``on_assigned``/``on_revoked``/``on_lost``."""


def co_partitioned(table: Table, stream: str) -> dict[str, Callback]:
    """Callbacks for :class:`~jetsdk.Consumer` (``**co_partitioned(table, stream)``) that
    make ``table`` hold the partitions of ``stream`` the member is assigned.

    Raises (from the consumer, at its first assignment):
        InvalidArgument: ``stream`` and the table's stream have different partition counts.
    """
    checked: list[bool] = []

    async def assigned(partitions: list[StreamPartition]) -> None:
        if not checked:
            info = await table._client.stream_info(stream)  # same package
            if len(info.partitions) != len(table.positions):
                raise InvalidArgument(
                    f"{stream!r} has {len(info.partitions)} partitions and table "
                    f"{table.stream!r} {len(table.positions)}: not co-partitioned",
                    details={"field": "stream"},
                )
            checked.append(True)
        await table.hold([p.partition for p in partitions if p.stream == stream])

    def released(partitions: list[StreamPartition]) -> None:
        table.release([p.partition for p in partitions if p.stream == stream])

    return {"on_assigned": assigned, "on_revoked": released, "on_lost": released}
