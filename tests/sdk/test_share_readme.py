"""The README's share-group example runs as written, against a real `jet dev`: it drains a
``jobs`` stream, dead-letters the poison message as ``rejected``, and ends when idle."""

from __future__ import annotations

from typing import Any

import anyio

from jetsdk import Client, Producer
from jetsdk.codec.record import iter_records
from jetsdk.consumer.share_consumer import read_share_group
from support.jet_dev import JetDev
from support.readme import README, python_block_under

HEADING = "### Share groups: queues on a stream"


def test_the_readme_share_example_runs(jet_dev: JetDev) -> None:
    namespace: dict[str, Any] = {"__name__": "readme_share_example"}
    exec(compile(python_block_under(HEADING), str(README), "exec"), namespace)

    async def main() -> tuple[int, dict[str, bytes], int]:
        async with Client(jet_dev.servers) as client:
            await client.create_stream("jobs", "jobs")
            async with Producer(client, "jobs") as producer:
                for i in range(20):
                    await producer.send_soon(b"poison" if i == 7 else b"job %d" % i)
            with anyio.fail_after(60):
                done = await namespace["work"](jet_dev.servers)
            _, raw = await client.fetch("workers-dlq", 0, 0, max_bytes=1 << 20, max_wait=0.0)
            (letter,) = list(iter_records(raw))
            state = await read_share_group(client, "workers")
            assert state is not None
            return done, dict(letter.headers), state.partition("jobs", 0).spso

    done, headers, spso = anyio.run(main)
    assert done == 19
    assert headers["Jet-Share-Offset"] == b"7"
    assert headers["Jet-Share-Reason"] == b"rejected"
    assert spso == 20  # everything finished: acked or dead-lettered
