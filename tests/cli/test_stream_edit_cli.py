"""`jet stream edit` and `jet stream purge` (issue 36, item 6) against `jet dev`."""

from __future__ import annotations

import anyio
import orjson

from jetsdk import AckPolicy, Client, Producer
from support.jet_cli import jet, ok
from support.jet_dev import JetDev


def _fill(jet_dev: JetDev, name: str, count: int) -> None:
    async def run() -> None:
        async with (
            Client(jet_dev.servers) as client,
            Producer(client, name, ack=AckPolicy.ALL) as producer,
        ):
            for i in range(count):
                await producer.send(b"%d" % i, partition=i % 2)

    anyio.run(run)


def test_edit_then_purge(jet_dev: JetDev) -> None:
    name = "cli-edit"
    ok(jet(jet_dev, "stream", "create", name, "--partitions", "2", "--retention-max-bytes", "1GB"))
    shown = ok(
        jet(
            jet_dev,
            *("stream", "edit", name, "--json"),
            *("--retention-max-messages", "5000", "--retention-max-bytes", "none"),
            *("--segment-max-age", "1h"),
        )
    )
    config = orjson.loads(shown)["config"]
    assert config["retention_max_messages"] == 5000
    assert config["retention_max_bytes"] is None
    assert config["segment_max_age_s"] == 3600.0

    limited = ok(jet(jet_dev, "stream", "edit", name, "--max-message-bytes", "2000", "--json"))
    assert orjson.loads(limited)["config"]["max_message_bytes"] == 2000
    back = ok(jet(jet_dev, "stream", "edit", name, "--max-message-bytes", "none", "--json"))
    assert orjson.loads(back)["config"]["max_message_bytes"] is None

    refused = jet(jet_dev, "stream", "edit", name, "--partitions", "4")
    assert refused.returncode == 2, refused.stderr
    assert "partitions" in refused.stderr
    assert jet(jet_dev, "stream", "edit", name).returncode == 2  # nothing to change

    _fill(jet_dev, name, 20)
    one = orjson.loads(
        ok(jet(jet_dev, "stream", "purge", name, "--partition", "0", "--before", "4", "--json"))
    )
    assert one == {"0": 4}
    every = orjson.loads(ok(jet(jet_dev, "stream", "purge", name, "--json")))
    assert every == {"0": 10, "1": 10}
    info = orjson.loads(ok(jet(jet_dev, "stream", "info", name, "--json")))
    assert [p["log_start"] for p in info["partitions"]] == [10, 10]
    too_far = jet(jet_dev, "stream", "purge", name, "--before", "11")
    assert too_far.returncode == 1
    assert "OffsetOutOfRange" in too_far.stderr


def test_no_nats_copies_on_create_and_edit(jet_dev: JetDev) -> None:
    """``--no-nats-copies`` on create; ``--no-nats-copies yes|no`` on edit (issue 39)."""
    name = "cli-no-copies"
    created = ok(jet(jet_dev, "stream", "create", name, "--no-nats-copies", "--json"))
    assert orjson.loads(created)["config"]["no_nats_copies"] is True
    edited = ok(jet(jet_dev, "stream", "edit", name, "--no-nats-copies", "no", "--json"))
    assert orjson.loads(edited)["config"]["no_nats_copies"] is False
    bad = jet(jet_dev, "stream", "edit", name, "--no-nats-copies", "maybe")
    assert bad.returncode == 2
    assert "not yes or no" in bad.stderr
    replicated = jet(jet_dev, "stream", "create", "cli-r2", "--replicas", "2", "--no-nats-copies")
    assert replicated.returncode != 0
    assert "no_nats_copies needs replication_factor 1" in replicated.stderr
