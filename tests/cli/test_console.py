"""`jet console` against a 3-server `jet dev` with traffic: every JSON endpoint and page over
HTTP, checked against the SDK's figures; writes only with --allow-writes. The real-browser
test is tests/cli/test_console_browser.py (same fixtures: tests/cli/conftest.py)."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime
from urllib.parse import quote

import anyio

from jetsdk import Client, StreamNotFound, StreamPartition
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import decode_json, encode_json
from jetsdk.consumer.group_admin import group_offsets
from jetserver.testing import wait_until
from support.jet_console import JetConsole
from support.jet_dev import JetDev

from .conftest import Traffic

WAIT_S = 30.0


async def _sdk_view(servers: list[str]) -> dict[str, object]:
    async with Client(servers) as client:
        raw = decode_json(await client.request_any(Api.METADATA, encode_json({"streams": None})))
        info = await client.stream_info("conA", refresh=True)
        hws = {p: (await client.list_offsets("conA", p)).hw for p in range(2)}
        committed = await group_offsets(client, "conGrp")
        return {
            "leader": raw["metadata_leader"],
            "leaders": {p.partition: p.leader for p in info.partitions},
            "isr": {p.partition: list(p.isr) for p in info.partitions},
            "hw": hws,
            "committed": {k.partition: v.offset for k, v in committed.items()},
        }


def sdk_view(dev: JetDev) -> dict[str, object]:
    return anyio.run(_sdk_view, dev.servers)


def test_cluster_and_streams_match_the_sdk(
    dev3: JetDev, console: JetConsole, traffic: Traffic
) -> None:
    sdk = sdk_view(dev3)
    cluster = console.get("/api/cluster")
    assert [s["id"] for s in cluster["servers"]] == ["s1", "s2", "s3"]
    assert all(s["up"] for s in cluster["servers"])
    assert cluster["metadata_leader"] == sdk["leader"]
    assert cluster["under_replicated"] == 0

    def streams_caught_up() -> bool:
        rows = {
            p["partition"]: p
            for s in console.get("/api/streams")["streams"]
            if s["name"] == "conA"
            for p in s["partition_rows"]
        }
        return {p: r["hw"] for p, r in rows.items()} == sdk["hw"]

    wait_until(streams_caught_up, WAIT_S, "the console's HWs equal the SDK's", interval_s=0.2)
    stream = next(s for s in console.get("/api/streams")["streams"] if s["name"] == "conA")
    assert stream["replication_factor"] == 3
    assert stream["config"]["retention_max_messages"] == 100_000
    assert stream["messages"] == sum(sdk["hw"].values())  # type: ignore[attr-defined]
    for row in stream["partition_rows"]:
        p = row["partition"]
        assert row["leader"] == sdk["leaders"][p]  # type: ignore[index]
        assert row["isr"] == sdk["isr"][p]  # type: ignore[index]
        assert row["leo"] == row["hw"]
        assert row["size_bytes"] > 0
        assert set(row["replica_lag"]) == set(row["replicas"]) - {row["leader"]}


def test_records_from_an_offset_and_a_time(console: JetConsole, traffic: Traffic) -> None:
    page = console.get("/api/records?stream=conA&partition=0&offset=2&limit=3")
    assert [r["offset"] for r in page["records"]] == [2, 3, 4]
    first = page["records"][0]
    sent = traffic.partition0[2]
    assert first["key_text"] == sent["key"]
    assert first["value_text"] == sent["value"]
    assert first["headers"] == [
        {
            "name": "h",
            "value_b64": base64.b64encode(sent["h"].encode()).decode(),
            "value_text": sent["h"],
        }
    ]
    assert first["subject"] == "conA"
    assert page["next"] == 5
    # The binary record: no text, exact bytes in base64.
    last = console.get(
        f"/api/records?stream=conA&partition=0&offset={traffic.binary_offset}&limit=1"
    )
    rec = last["records"][0]
    assert rec["value_text"] is None
    assert base64.b64decode(rec["value_b64"]) == b"\x00\xff\x10"
    assert rec["key_b64"] is None
    # From a time: the first offset stored at or after it, as the SDK resolves it.
    at = datetime.fromtimestamp(traffic.middle_ns / 1e9, UTC).isoformat()
    by_time = console.get(f"/api/records?stream=conA&partition=0&time={quote(at)}&limit=2")
    assert by_time["start"] == traffic.middle_offset0
    assert by_time["records"][0]["offset"] == traffic.middle_offset0
    ms = console.get(f"/api/records?stream=conA&partition=0&time={traffic.middle_ns // 10**6}")
    assert ms["start"] == traffic.middle_offset0
    # Default: the last `limit` records.
    tail = console.get("/api/records?stream=conA&partition=1&limit=4")
    assert [r["offset"] for r in tail["records"]] == list(range(tail["hw"] - 4, tail["hw"]))


def test_groups_match_the_sdk(dev3: JetDev, console: JetConsole, traffic: Traffic) -> None:
    def group() -> dict[str, object] | None:
        groups = {g["name"]: g for g in console.get("/api/groups")["groups"]}
        return groups.get("conGrp")

    wait_until(
        lambda: (g := group()) is not None and g["members"],
        WAIT_S,
        "conGrp's member shown",
        interval_s=0.2,
    )
    sdk = sdk_view(dev3)
    g = group()
    assert g is not None
    members = g["members"]
    assert len(members) == 1  # type: ignore[arg-type]
    assert sorted(members[0]["partitions"]) == ["conA/0", "conA/1"]  # type: ignore[index]
    rows = {p["partition"]: p for p in g["partitions"]}  # type: ignore[attr-defined]
    assert {p: r["committed"] for p, r in rows.items() if r["committed"] is not None} == sdk[
        "committed"
    ]
    for p, row in rows.items():
        assert row["member"] == members[0]["member"]  # type: ignore[index]
        base = row["committed"] if row["committed"] is not None else 0
        assert row["lag"] == sdk["hw"][p] - base  # type: ignore[index]
    assert g["lag"] == sum(r["lag"] for r in rows.values())


def test_history_has_rates_and_lag(console: JetConsole, traffic: Traffic) -> None:
    history = console.get("/api/history")
    assert len(history["t"]) >= 2
    assert max(v or 0 for v in history["in"]["conA"]) > 0
    assert "conGrp" in history["lag"]
    assert all(len(series) == len(history["t"]) for series in history["in"].values())


def test_pages_and_assets(console: JetConsole) -> None:
    status, html, headers = console.request("GET", "/")
    assert status == 200
    assert headers["content-type"].startswith("text/html")
    assert '<script src="/static/app.js"' in html
    for asset, kind in (("app.js", "text/javascript"), ("app.css", "text/css")):
        status, text, headers = console.request("GET", f"/static/{asset}")
        assert status == 200
        assert headers["content-type"].startswith(kind)
        # Shipped in the package, nothing fetched from elsewhere (no CDN).
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), asset
    assert not re.search(r"https?://", html)
    assert console.request("GET", "/static/../app.py")[0] == 404
    assert console.request("GET", "/nope")[0] == 404
    assert console.request("GET", "/api/records")[0] == 400
    assert console.request("GET", "/api/records?stream=missing")[0] == 404
    assert console.request("GET", "/api/records?stream=conA&partition=9")[0] == 404
    assert console.request("GET", "/api/records?stream=conA&offset=x")[0] == 400
    # Said, not clamped silently (issue 35).
    for query, fragment in (
        ("limit=0", "limit must be between 1 and 500"),
        ("limit=100000", "limit must be between 1 and 500"),
        ("offset=1000000000", "offset 1000000000 is above the high watermark"),
    ):
        status, body, _ = console.request("GET", f"/api/records?stream=conA&{query}")
        assert status == 400, (query, body)
        assert fragment in body["error"], (query, body)
    assert console.request("PUT", "/api/streams")[0] == 405


def test_read_only_by_default(console: JetConsole) -> None:
    assert console.get("/api/config")["allow_writes"] is False
    status, body, _ = console.request(
        "POST", "/api/streams", {"name": "nope"}, {"X-Jet-Console": "1"}
    )
    assert status == 403
    assert "--allow-writes" in body["error"]
    assert console.request("DELETE", "/api/streams/conA", None, {"X-Jet-Console": "1"})[0] == 403
    produce = {"stream": "conA", "value": "x"}
    assert console.request("POST", "/api/records", produce, {"X-Jet-Console": "1"})[0] == 403


def test_writes_with_allow_writes(dev3: JetDev, traffic: Traffic) -> None:
    async def exists(name: str) -> bool:
        async with Client(dev3.servers) as client:
            try:
                await client.describe_stream(name)
            except StreamNotFound:
                return False
            return True

    async def offsets(group: str) -> dict[StreamPartition, int]:
        async with Client(dev3.servers) as client:
            return {k: v.offset for k, v in (await group_offsets(client, group)).items()}

    with JetConsole.start(dev3, "--allow-writes") as rw:
        assert rw.get("/api/config")["allow_writes"] is True
        # Without the header a cross-site form could not add, nothing changes.
        assert rw.request("POST", "/api/streams", {"name": "conNew"})[0] == 403
        status, body, _ = rw.request(
            "POST",
            "/api/streams",
            {"name": "conNew", "partitions": 2, "retention_max_messages": 50},
            {"X-Jet-Console": "1"},
        )
        assert status == 201, body
        assert len(body["created"]["partitions"]) == 2
        assert anyio.run(exists, "conNew")

        def listed() -> set[str]:
            return {s["name"] for s in rw.get("/api/streams")["streams"]}

        wait_until(lambda: "conNew" in listed(), 30, "conNew listed")
        again = rw.request("POST", "/api/streams", {"name": "conNew"}, {"X-Jet-Console": "1"})
        assert again[0] == 409
        # Settings beyond their limits or of the wrong type: 400 naming the setting.
        for field, value in (
            ("retention_max_messages", 2**63),
            ("retention_max_age", "nan"),
            ("retention_max_age", "1e999"),
            ("partitions", 2.7),
            ("partitions", True),
        ):
            status, body, _ = rw.request(
                "POST", "/api/streams", {"name": "conBad", field: value}, {"X-Jet-Console": "1"}
            )
            assert status == 400, (field, value, body)
            assert field.removesuffix("_age") in str(body), (field, value, body)
        assert not anyio.run(exists, "conBad")
        status, body, _ = rw.request("DELETE", "/api/streams/conNew", None, {"X-Jet-Console": "1"})
        assert status == 200, body
        # Gone from the listing at once, not after the next sample (issue 35).
        assert "conNew" not in listed()
        assert not anyio.run(exists, "conNew")
        # Reset a group without active members ("conIdle" committed by the fixture).
        status, body, _ = rw.request(
            "POST",
            "/api/groups/conIdle/reset",
            {"stream": "conA", "to": "earliest"},
            {"X-Jet-Console": "1"},
        )
        assert status == 200, body
        assert anyio.run(offsets, "conIdle") == {
            StreamPartition("conA", 0): 0,
            StreamPartition("conA", 1): 0,
        }
        status, body, _ = rw.request(
            "POST",
            "/api/groups/conIdle/reset",
            {"stream": "conA", "to": 3, "partitions": [1]},
            {"X-Jet-Console": "1"},
        )
        assert status == 200, body
        assert anyio.run(offsets, "conIdle")[StreamPartition("conA", 1)] == 3
        # Produce one message (issue 35): acked ALL, read back as sent.
        sent = {
            "stream": "conRw",
            "partition": 1,
            "value": "hello",
            "key": "pk",
            "headers": [["h", "x"]],
        }
        status, body, _ = rw.request(
            "POST", "/api/streams", {"name": "conRw", "partitions": 2}, {"X-Jet-Console": "1"}
        )
        assert status == 201, body
        status, ack, _ = rw.request("POST", "/api/records", sent, {"X-Jet-Console": "1"})
        assert status == 200, ack
        assert (ack["stream"], ack["partition"], ack["offset"]) == ("conRw", 1, 0)
        (got,) = rw.get("/api/records?stream=conRw&partition=1&offset=0&limit=1")["records"]
        assert (got["value_text"], got["key_text"]) == ("hello", "pk")
        assert [(h["name"], h["value_text"]) for h in got["headers"]] == [("h", "x")]
        for bad, fragment in (
            ({"stream": "conRw", "value": 5}, "'value' must be a string"),
            ({"stream": "conRw", "value": "v", "partition": 9}, "'partition' must be"),
            ({"stream": "conRw", "value": "v", "headers": [["h"]]}, "a header must be"),
        ):
            status, body, _ = rw.request("POST", "/api/records", bad, {"X-Jet-Console": "1"})
            assert status == 400, (bad, body)
            assert fragment in body["error"], body
        big = {"stream": "conRw", "value": "v" * 2_000_000}
        assert rw.request("POST", "/api/records", big, {"X-Jet-Console": "1"})[0] == 413
        # A dry run: the offsets now and after, nothing written.
        status, body, _ = rw.request(
            "POST",
            "/api/groups/conIdle/reset",
            {"stream": "conA", "to": 5, "dry_run": True},
            {"X-Jet-Console": "1"},
        )
        assert status == 200, body
        assert body == {
            "group": "conIdle",
            "dry_run": True,
            "offsets": {"conA/0": 5, "conA/1": 5},
            "current": {"conA/0": 0, "conA/1": 3},
        }
        assert anyio.run(offsets, "conIdle") == {
            StreamPartition("conA", 0): 0,
            StreamPartition("conA", 1): 3,
        }
        for bad in (b"not json", {"stream": 5}, {"stream": "conA", "to": "yesterday"}):
            status, body, _ = rw.request(
                "POST", "/api/groups/conIdle/reset", bad, {"X-Jet-Console": "1"}
            )
            assert status == 400, (bad, body)
        # A live group's offsets are not moved from outside: 409.
        status, body, _ = rw.request(
            "POST", "/api/groups/conGrp/reset", {"stream": "conA"}, {"X-Jet-Console": "1"}
        )
        assert status == 409, body
