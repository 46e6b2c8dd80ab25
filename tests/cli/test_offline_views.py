"""Issue 35's repro: on a 3-server cluster, ``rf1`` (3 partitions at replication factor 1)
loses the server leading rf1/0 to kill -9. Every view must show rf1/0 offline and count it,
and the counts must agree with the SDK's metadata: the SDK itself, the metadata leader's
metrics, ``jet stream info``, ``jet cluster status``, ``jet console`` (its API and a real
Chromium) and ``jet top`` (in tmux).

One cluster for the module (its kill is the point); ``jet top`` runs in tmux from before the
kill, so the test also sees that its screen keeps refreshing through the loss. Screenshots of
the offline state go to the test's tmp dir and to $JET_SCREENSHOT_DIR when set.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import orjson
import pytest

from jetsdk import AckPolicy, Client, Producer, StreamPartition
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import decode_json, encode_json
from jetsdk.consumer.group_admin import commit_offsets
from jetsdk.metadata import ClusterMetadata
from jetserver.testing import Cluster, wait_until
from support.browser import SharedChromium, wait_js
from support.jet_cli import jet, jet_env
from support.jet_console import JetConsole

from .test_top_cli import TMUX, Pane, save_svg

WAIT_S = 30.0
SCRAPE_TIMEOUT_S = 10.0


def screenshot_dir() -> Path | None:
    """$JET_SCREENSHOT_DIR (created), or None."""
    where = os.environ.get("JET_SCREENSHOT_DIR")
    if not where:
        return None
    path = Path(where)
    path.mkdir(parents=True, exist_ok=True)
    return path


def keep(path: Path) -> None:
    """Copy a screenshot to $JET_SCREENSHOT_DIR when set."""
    where = screenshot_dir()
    if where is not None:
        shutil.copy(path, where / path.name)


@attrs.define
class Lost:
    """The cluster after the kill."""

    cluster: Cluster
    servers: list[str]
    """Every server's address (the killed one's included)."""
    killed: str
    """Id of the server that led rf1/0."""
    console: JetConsole
    top: Pane | None
    narrow: Pane | None
    """``jet top`` in an 80x16 terminal."""
    top_screens: list[tuple[float, str]]
    """(monotonic time, screen) captured around the kill."""
    killed_at: float


def metadata(servers: list[str]) -> tuple[ClusterMetadata, dict[str, Any]]:
    async def ask() -> dict[str, Any]:
        async with Client(servers) as client:
            raw = await client.request_any(Api.METADATA, encode_json({"streams": None}))
            return dict(decode_json(raw))

    raw = anyio.run(ask)
    return ClusterMetadata.from_json(raw), raw


async def _setup(servers: list[str]) -> str:
    async with Client(servers) as client:
        await client.create_stream("rf1", partitions=3, replication_factor=1)
        await client.create_stream("rf3", partitions=1, replication_factor=3)
        async with Producer(client, "rf1", ack=AckPolicy.ALL) as producer:
            for p in range(3):
                await producer.send_soon(b"m%d" % p, partition=p)
            await producer.flush()
        # A consumer group: the internal __groups stream exists, counted apart everywhere.
        await commit_offsets(client, "offgrp", {StreamPartition("rf3", 0): 0})
        info = await client.stream_info("rf1", refresh=True)
        leader = info.partitions[0].leader
        assert leader is not None
        return leader


def _watch(pane: Pane, until: float, out: list[tuple[float, str]]) -> None:
    while time.monotonic() < until:
        out.append((time.monotonic(), pane.screen()))
        time.sleep(0.1)


@pytest.fixture(scope="module")
def lost(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lost]:
    root = tmp_path_factory.mktemp("offline")
    with Cluster(size=3, root=root, settings={"metrics": {"port": 0}}) as cluster:
        killed = anyio.run(_setup, cluster.addresses)
        with JetConsole.start(cluster.addresses) as console:
            pane = narrow = None
            screens: list[tuple[float, str]] = []
            if TMUX is not None:
                env = jet_env(None) | {
                    "JET_SERVERS": ",".join(cluster.addresses),
                    "TERM": "xterm-256color",
                    "COLUMNS": "160",
                }
                pane = Pane([sys.executable, "-m", "jetserver.cli.main", "top"], env)
                pane.wait_for(lambda s: "rf1 " in s and "0 offline" in s, "rf1's rows")
                narrow = Pane(
                    [sys.executable, "-m", "jetserver.cli.main", "top"],
                    env | {"COLUMNS": "80"},
                    width=80,
                    height=16,
                    name="narrow",
                )
            try:
                if pane is not None:
                    _watch(pane, time.monotonic() + 1.0, screens)
                killed_at = time.monotonic()
                cluster.kill(killed, signal.SIGKILL)
                if pane is not None:
                    _watch(pane, time.monotonic() + 6.0, screens)

                def offline_seen() -> bool:
                    meta, _ = metadata(cluster.addresses)
                    return meta.streams["rf1"].partitions[0].is_offline

                wait_until(offline_seen, WAIT_S, "rf1/0 offline in the metadata")
                yield Lost(
                    cluster, cluster.addresses, killed, console, pane, narrow, screens, killed_at
                )
            finally:
                for opened in (pane, narrow):
                    if opened is not None:
                        opened.close()


def user_counts(meta: ClusterMetadata) -> dict[str, int]:
    """The SDK's figures for the user streams: partitions, offline, under-replicated."""
    parts = [p for s in meta.streams.values() if not s.internal for p in s.partitions]
    return {
        "partitions": len(parts),
        "offline": sum(1 for p in parts if p.is_offline),
        "under_replicated": sum(1 for p in parts if p.under_replicated),
    }


def test_the_sdk_metadata_says_offline(lost: Lost) -> None:
    meta, raw = metadata(lost.servers)
    rf1 = meta.streams["rf1"]
    assert rf1.partitions[0].leader == lost.killed
    assert rf1.partitions[0].offline == f"leader {lost.killed} does not answer"
    assert rf1.partitions[0].state == "offline"
    assert [p.is_offline for p in rf1.partitions[1:]] == [
        p.leader == lost.killed for p in rf1.partitions[1:]
    ]
    assert meta.servers[lost.killed].live is False
    assert all(s.live for sid, s in meta.servers.items() if sid != lost.killed)
    # rf3 lost one replica: under-replicated once the ISR shrinks, never offline (another
    # replica leads).
    rf3 = meta.streams["rf3"].partitions[0]
    assert not rf3.is_offline
    assert raw["metadata_leader"] != lost.killed


def scrape(address: str) -> str:
    import http.client

    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=SCRAPE_TIMEOUT_S)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def sample(text: str, name: str, labels: str = "") -> float | None:
    m = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.MULTILINE)
    return None if m is None else float(m.group(1))


def test_the_metadata_leader_exports_the_counts(lost: Lost) -> None:
    def agree() -> bool:
        meta, raw = metadata(lost.servers)
        want = user_counts(meta)
        exposed = {}
        for s in lost.cluster.live():
            info = orjson.loads(s.ready_file.read_bytes())
            exposed[s.server_id] = scrape(info["metrics_address"])
        leaders = [sid for sid, t in exposed.items() if sample(t, "jet_metadata_leader") == 1]
        if leaders != [raw["metadata_leader"]]:
            return False
        for sid, text in exposed.items():
            offline = sample(text, "jet_partitions_offline", '{internal="false"}')
            if sid != leaders[0]:
                assert offline is None, f"{sid} is not the metadata leader but exports counts"
                continue
            got = {
                "partitions": sample(text, "jet_partitions", '{internal="false"}'),
                "offline": offline,
                "under_replicated": sample(
                    text, "jet_partitions_under_replicated", '{internal="false"}'
                ),
            }
            assert got["offline"] is not None
            assert got["offline"] >= 1
            under_min = sample(text, "jet_partitions_under_min_isr", '{internal="false"}')
            assert under_min is not None
            assert under_min >= got["offline"]
            return got == want
        return False

    wait_until(agree, WAIT_S, "the metadata leader's counts equal to the SDK's")


def test_jet_stream_info_shows_it(lost: Lost) -> None:
    done = jet(lost, "stream", "info", "rf1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    row0 = next(line.split() for line in lines if line.split()[:2] == ["0", "rf1"])
    assert row0[2] == "OFFLINE", done.stdout
    assert f"OFFLINE partition 0: leader {lost.killed} does not answer" in done.stdout
    meta, _ = metadata(lost.servers)
    offline = sum(1 for p in meta.streams["rf1"].partitions if p.is_offline)
    assert f"3 partition(s): {offline} offline" in done.stdout
    # The live partitions show their leader's HW, whichever server answered.
    done = jet(lost, "stream", "info", "rf1", "--json")
    info = orjson.loads(done.stdout)
    for p in info["partitions"]:
        if p["offline"] is None:
            assert (p["hw"], p["leo"]) == (1, 1), p
        else:
            assert p["hw"] is None


def test_jet_cluster_status_shows_it(lost: Lost) -> None:
    done = jet(lost, "cluster", "status", "--json")
    assert done.returncode == 1  # not healthy
    report = orjson.loads(done.stdout)
    rows = {(p["stream"], p["partition"]): p for p in report["partitions"]}
    assert rows[("rf1", 0)]["state"] == "offline"
    assert rows[("rf1", 0)]["offline_reason"] == f"leader {lost.killed} does not answer"
    meta, _ = metadata(lost.servers)
    want = user_counts(meta)
    assert {k: report["counts"][k] for k in want} == want
    down = [s["id"] for s in report["servers"] if not s["up"]]
    assert down == [lost.killed]
    text = jet(lost, "cluster", "status").stdout
    assert re.search(r"^rf1\s+0\s+OFFLINE\s", text, re.MULTILINE), text


def test_the_console_shows_it(lost: Lost, tmp_path: Path, chromium: SharedChromium) -> None:
    from .test_console_browser import text

    def agrees() -> bool:
        meta, _ = metadata(lost.servers)
        want = user_counts(meta)
        c = lost.console.get("/api/cluster")
        return {k: c[k] for k in want} == want and c["offline"] >= 1

    wait_until(agrees, WAIT_S, "the console's counts equal to the SDK's")
    meta, _ = metadata(lost.servers)
    internal = [p for s in meta.streams.values() if s.internal for p in s.partitions]
    cluster = lost.console.get("/api/cluster")
    assert cluster["streams"] == sum(1 for s in meta.streams.values() if not s.internal)
    assert cluster["internal_partitions"] == len(internal) > 0
    streams = {s["name"]: s for s in lost.console.get("/api/streams")["streams"]}
    rf1 = streams["rf1"]
    assert rf1["offline"] >= 1
    assert rf1["messages"] == 3 - rf1["offline"]  # the live partitions' messages
    rows = {r["partition"]: r for r in rf1["partition_rows"]}
    assert rows[0]["state"] == "offline"
    assert rows[0]["is_offline"]
    with chromium.page() as driver:
        driver.get(lost.console.url + "#/cluster")
        wait_js(driver, text("#offline-count"), lambda v: v not in (None, "0"), "offline count")
        color = driver.execute_script(
            "return getComputedStyle(document.querySelector('#offline-count')).color"
        )
        assert color == "rgb(185, 28, 28)", color  # --bad
        shot = tmp_path / "console-offline-cluster.png"
        assert driver.save_screenshot(str(shot))
        keep(shot)
        driver.get(lost.console.url + "#/streams")
        leader = wait_js(
            driver,
            text('tr[data-partition="rf1/0"] td.leader'),
            lambda v: v is not None and v.startswith("OFFLINE"),
            "rf1/0 offline",
        )
        assert leader == f"OFFLINE ({lost.killed})"
        state = driver.execute_script(
            "const r = document.querySelector('tr[data-partition=\"rf1/0\"]');"
            "return [r.dataset.state, getComputedStyle(r.querySelector('td')).color]"
        )
        assert state == ["offline", "rgb(185, 28, 28)"], state
        messages = driver.execute_script(text('tr[data-stream="rf1"] td.messages'))
        assert "offline" in messages, messages
        assert messages.startswith(str(rf1["messages"])), messages
        shot = tmp_path / "console-offline-streams.png"
        assert driver.save_screenshot(str(shot))
        keep(shot)
        # Its records: an error at once, in place (not after the client's retries).
        began = time.monotonic()
        driver.execute_script("location.hash = '#/partition/rf1/0'")
        error = wait_js(
            driver,
            text("#page-error"),
            lambda v: v is not None and "offline" in v,
            "rf1/0's records refused",
        )
        took = time.monotonic() - began
        assert error == f"partition rf1/0 is offline: leader {lost.killed} does not answer"
        assert took < 3.0, took


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)")
def test_jet_top_shows_it_without_freezing(lost: Lost, tmp_path: Path) -> None:
    assert lost.top is not None
    meta, _ = metadata(lost.servers)
    want = user_counts(meta)
    rf1_offline = [p.partition for p in meta.streams["rf1"].partitions if p.is_offline]
    expected = f"{want['offline']} offline, {want['under_replicated']} under-replicated"
    screen = lost.top.wait_for(lambda s: expected in s, f"the counts {expected!r}")
    for line in screen.splitlines():
        cells = line.split()
        if cells[:1] == ["rf1"] and cells[1].isdigit():
            offline = int(cells[1]) in rf1_offline
            assert (cells[2] == f"OFFLINE({lost.killed})") == offline, line
    ansi = lost.top.screen(ansi=True)
    red = [line for line in ansi.splitlines() if "OFFLINE(" in line]
    assert red
    assert all(re.search(r"\x1b\[(1;)?31m", line) for line in red), red
    save_svg(ansi, tmp_path / "jet-top-offline.svg")
    keep(tmp_path / "jet-top-offline.svg")
    # Through the kill the screen kept refreshing: its clock (one per sample) never stood
    # still for more than the per-server bound (2 s) plus a sample period.
    clocks: list[tuple[float, str]] = []
    for at, seen in lost.top_screens:
        m = re.search(r"\d\d:\d\d:\d\d", seen)
        if m and (not clocks or clocks[-1][1] != m.group(0)):
            clocks.append((at, m.group(0)))
    print("top's clock after the kill:", [(round(at - lost.killed_at, 2), c) for at, c in clocks])
    after = [at for at, _ in clocks if at > lost.killed_at]
    assert len(after) >= 3, clocks
    gaps = [b - a for a, b in zip([lost.killed_at, *after], after, strict=False)]
    assert max(gaps) < 3.0, gaps


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)")
def test_jet_top_fits_80_columns(lost: Lost, tmp_path: Path) -> None:
    assert lost.narrow is not None
    screen = lost.narrow.wait_for(lambda s: "OFFLINE(" in s, "the offline row at 80 columns")
    assert "…" not in screen, screen
    assert all(len(line.rstrip()) <= 80 for line in screen.splitlines())
    # Narrow: the short column headers.
    assert "RLAG" in screen
    # Nothing wraps: the counts (user rows, internal apart) on one line.
    pattern = (
        r"^\d+ rows: 1 offline, \d+ under-repl\.  internal \d+: \d+ offline, \d+ under-repl\.$"
    )
    assert re.search(pattern, screen, re.MULTILINE), screen
    save_svg(lost.narrow.screen(ansi=True), tmp_path / "jet-top-offline-80x16.svg")
    keep(tmp_path / "jet-top-offline-80x16.svg")


def test_the_tools_keep_one_connection_per_server(lost: Lost) -> None:
    """jet console and the two jet tops sample every second; they open no new connection
    to a server from sample to sample (they opened one per server and sample before)."""
    live = lost.cluster.live()[0]
    address = orjson.loads(live.ready_file.read_bytes())["metrics_address"]

    def accepted() -> float:
        value = sample(scrape(address), "jet_connections_accepted_total")
        assert value is not None
        return value

    before = accepted()
    time.sleep(5.0)  # a measuring window of about five samples of each tool, not a wait
    grown = accepted() - before
    assert grown <= 2, f"{grown} connections accepted in 5 s"
