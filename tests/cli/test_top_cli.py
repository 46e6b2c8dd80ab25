"""`jet top` driven in a pseudo-terminal (tmux send-keys / capture-pane) against a 3-server
`jet dev`: the screen's HW, group lag and rates against the SDK's figures, filter, sort, quit.
The under-replicated highlight is checked on the rendering itself (a shrunk ISR takes the
servers' replica_lag_max_s, 10 s, to appear).

The test leaves an SVG of the screen in its tmp dir (and in $JET_DOCS_DIR when set: the
README's picture comes from here).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import attrs
import pytest
from rich.console import Console
from rich.text import Text

from jetsdk import AckPolicy, Client, Producer, StreamPartition
from jetsdk.consumer.group_admin import commit_offsets, group_lag
from jetserver.observe.sampler import GroupPartition, GroupRow, PartitionRow, Snapshot
from jetserver.observe.top_view import ViewState, compact, keys_of, render
from support.jet_cli import jet_env
from support.jet_dev import JetDev

TMUX = shutil.which("tmux")
WAIT_S = 30.0
WIDTH, HEIGHT = 160, 40


class Pane:
    """A command in a detached tmux session on a private socket."""

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        width: int = WIDTH,
        height: int = HEIGHT,
        name: str = "",
    ) -> None:
        assert TMUX is not None
        self.socket = f"jet-top-test-{os.getpid()}{name}"
        # The pane's size, not one inherited: pytest-xdist workers run with LINES=24 in their
        # environment, which rich takes over the terminal's own size (a 16-line pane then
        # showed the last lines of a 24-line screen, a 40-line one 24 lines).
        self.env = env | {"COLUMNS": str(width), "LINES": str(height)}
        line = " ".join(shlex.quote(c) for c in command)
        self.tmux("new-session", "-d", "-x", str(width), "-y", str(height), "-s", "top", line)

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert TMUX is not None
        return subprocess.run(
            [TMUX, "-L", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=10,
            env=self.env,
            check=False,
        )

    def screen(self, ansi: bool = False) -> str:
        return self.tmux("capture-pane", "-p", *(["-e"] if ansi else []), "-t", "top").stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "top", *keys)

    def alive(self) -> bool:
        return self.tmux("has-session", "-t", "top").returncode == 0

    def wait_for(self, check: Callable[[str], bool], what: str) -> str:
        deadline = time.monotonic() + WAIT_S
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if check(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"screen never showed {what}:\n{screen}")

    def close(self) -> None:
        self.tmux("kill-server")  # this test's own tmux server (private socket)


def rows(screen: str, stream: str) -> dict[int, list[str]]:
    """Partition -> the cells of its row (STREAM P LEADER ISR HW LEO IN OUT REPL GLAG SIZE)."""
    out = {}
    for line in screen.splitlines():
        cells = line.split()
        if len(cells) >= 11 and cells[0] == stream and cells[1].isdigit():
            out[int(cells[1])] = cells
    return out


def num(cell: str) -> int:
    """A figure of the screen; -1 for "-" (not known yet)."""
    return -1 if cell == "-" else int(cell.replace(",", ""))


async def _setup(servers: list[str]) -> dict[str, object]:
    async with Client(servers) as client:
        await client.create_stream("topa", partitions=2, replication_factor=3)
        await client.create_stream("topb", partitions=1, replication_factor=3)
        async with Producer(client, "topa", ack=AckPolicy.ALL) as producer:
            for i in range(30):
                await producer.send_soon(b"a%d" % i, partition=i % 2)
            await producer.flush()
        await commit_offsets(client, "topgrp", {StreamPartition("topa", 0): 5})
        lag = await group_lag(client, "topgrp", ["topa"])
        hw = {p: (await client.list_offsets("topa", p)).hw for p in range(2)}
        return {"hw": hw, "lag": {k.partition: v.lag for k, v in lag.items()}}


async def _traffic(servers: list[str], count: int, rate: float) -> int:
    async with (
        Client(servers) as client,
        Producer(client, "topb", linger=0, ack=AckPolicy.ALL) as producer,
    ):
        began = time.monotonic()
        for i in range(count):
            await anyio.sleep(max(0.0, began + i / rate - time.monotonic()))
            await producer.send_soon(b"b%d" % i)
        await producer.flush()
        return (await client.list_offsets("topb", 0)).hw


def save_svg(ansi: str, path: Path) -> None:
    """The captured screen as an SVG (rich renders the ANSI colours)."""
    text = Text.from_ansi(ansi.rstrip("\n"))
    width = max(len(line.rstrip()) for line in text.plain.splitlines()) + 1
    console = Console(record=True, width=width, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(text)
    svg = console.export_svg(title="jet top")
    # Local fonts only: rich names web fonts on a CDN, which a README picture does not need.
    svg = re.sub(r'(local\("[^"]+"\))(,\s*url\("https://[^"]+"\) format\("[^"]+"\))+', r"\1", svg)
    assert 'url("http' not in svg
    path.write_text(svg)


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)")
def test_top_in_a_terminal(dev3: JetDev, tmp_path: Path) -> None:
    figures = anyio.run(_setup, dev3.servers)
    hw: dict[int, int] = figures["hw"]  # type: ignore[assignment]
    lag: dict[int, int] = figures["lag"]  # type: ignore[assignment]
    assert hw == {0: 15, 1: 15}
    assert lag == {0: 10, 1: 15}
    env = jet_env(dev3) | {"TERM": "xterm-256color", "COLUMNS": str(WIDTH)}
    # Only this test's streams: the jet dev it shares holds other tests' streams too, which
    # sort before topa and could fill the screen (68 partitions in one parallel run).
    pane = Pane([sys.executable, "-m", "jetserver.cli.main", "top", "--stream", "top"], env)
    try:
        screen = pane.wait_for(lambda s: len(rows(s, "topa")) == 2, "topa's partitions")
        assert "metadata leader: s" in screen
        assert re.search(r"servers: s1 up\s+s2 up\s+s3 up", screen), screen
        got = rows(screen, "topa")
        for p in (0, 1):
            assert num(got[p][4]) == hw[p]  # HW
            assert num(got[p][5]) == hw[p]  # LEO (nothing in flight)
            assert got[p][3].count(",") == 2  # ISR of 3, not under-replicated
            assert got[p][8] == "0"  # replica lag
            assert num(got[p][9]) == lag[p]  # group lag (p1: nothing committed)
        group_line = next(line for line in screen.splitlines() if line.startswith("topgrp"))
        assert group_line.split()[-1] == str(sum(lag.values()))
        assert "__groups" not in screen  # internal streams hidden by default

        # Traffic on topb: its IN/S turns positive, then its HW settles on the SDK's figure.
        with anyio.from_thread.start_blocking_portal() as portal:
            future = portal.start_task_soon(_traffic, dev3.servers, 600, 150.0)
            pane.wait_for(
                lambda s: 0 in rows(s, "topb") and num(rows(s, "topb")[0][6]) > 0,
                "a positive IN/S on topb",
            )
            final_hw = future.result(timeout=WAIT_S)
        assert final_hw == 600
        pane.wait_for(
            lambda s: 0 in rows(s, "topb") and num(rows(s, "topb")[0][4]) == final_hw,
            f"topb's HW at {final_hw}",
        )
        save_svg(pane.screen(ansi=True), tmp_path / "jet-top.svg")
        docs = os.environ.get("JET_DOCS_DIR")
        if docs:
            shutil.copy(tmp_path / "jet-top.svg", Path(docs) / "jet-top.svg")
        assert (tmp_path / "jet-top.svg").read_text().startswith("<svg")

        # Filter: f, type, Enter.
        pane.keys("f", "t", "o", "p", "b", "Enter")
        screen = pane.wait_for(lambda s: "filter: topb" in s, "the filter applied")
        screen = pane.wait_for(lambda s: not rows(s, "topa"), "topa filtered out")
        assert rows(screen, "topb")
        # Sort: s cycles to the in rate, largest first.
        pane.keys("s")
        pane.wait_for(lambda s: "sort: in (desc)" in s, "the sort by in rate")
        # q quits.
        pane.keys("q")
        deadline = time.monotonic() + WAIT_S
        while pane.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pane.alive()
    finally:
        pane.close()


def test_under_replicated_partitions_are_red() -> None:
    def row(partition: int, isr: tuple[str, ...]) -> PartitionRow:
        return PartitionRow(
            stream="s",
            partition=partition,
            leader="s1",
            leader_epoch=1,
            replicas=("s1", "s2", "s3"),
            isr=isr,
            hw=7,
            leo=9,
            log_start=0,
            size_bytes=100,
            replica_lag={"s2": 2, "s3": None},
            in_rate=1.0,
            out_rate=0.0,
            offline={},
        )

    snap = Snapshot(
        at=time.time(),
        metadata_leader="s1",
        servers=(
            {"id": "s1", "address": "a", "up": True},
            {"id": "s3", "address": "b", "up": False},
        ),
        streams=(),
        partitions=(row(0, ("s1", "s2", "s3")), row(1, ("s1", "s2"))),
        groups=(GroupRow("g", (), (GroupPartition("s", 1, None, 3, 7, 4),)),),
    )
    console = Console(record=True, width=WIDTH, color_system="standard", file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render(snap, ViewState(), "x"))
    plain = console.export_text(styles=False, clear=False)
    styled = console.export_text(styles=True)
    red_lines = [line for line in styled.splitlines() if "\x1b[1;31m" in line]
    assert any("s1,s2 (2/3)" in line for line in red_lines)
    assert not any("s1,s2,s3" in line for line in red_lines)
    assert any("DOWN" in line for line in red_lines)
    assert "2+?" in plain  # one follower's lag unknown
    assert "1 under-replicated" in plain


def test_sort_choices_match_the_view() -> None:
    from jetserver.cli import top_cmd
    from jetserver.observe import top_view

    assert top_cmd.SORT_KEYS == top_view.SORT_KEYS
    view = top_view.ViewState()
    for char in "f" + "ab\x7fc" + "\r":
        assert view.key(char)
    assert view.filter == "ac"
    assert view.matches("zacx")
    assert not view.matches("abx")
    assert not view.matches("__groups")
    view.filter = "a*"
    assert view.matches("abc")
    assert not view.matches("cab")
    assert not view.key("q")


def _row(stream: str, partition: int, **changes: object) -> PartitionRow:
    base = PartitionRow(
        stream=stream,
        partition=partition,
        leader="s1",
        leader_epoch=1,
        replicas=("s1", "s2", "s3"),
        isr=("s1", "s2", "s3"),
        hw=3_483_812,
        leo=3_483_812,
        log_start=0,
        size_bytes=912_345_678,
        replica_lag={"s2": 0, "s3": 0},
        in_rate=12_345.0,
        out_rate=0.0,
        offline={},
    )
    return attrs.evolve(base, **changes)


def _screen(snap: Snapshot, view: ViewState, width: int) -> str:
    console = Console(record=True, width=width, color_system=None, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render(snap, view, "x", width=width))
    return console.export_text(styles=False)


def test_narrow_terminals_get_abbreviated_figures() -> None:
    assert [compact(v) for v in (0, 9_999, 12_345, 3_483_812, 999_999, 2.5e9)] == [
        "0",
        "9,999",
        "12.3k",
        "3.48M",
        "1.00M",
        "2.50G",
    ]
    snap = Snapshot(time.time(), "s1", (), (), (_row("big", 0),), ())
    text = _screen(snap, ViewState(), 80)
    line = next(line for line in text.splitlines() if line.startswith("big"))
    assert "3.48M" in line
    assert "912M" in line
    assert "…" not in text  # nothing cut
    assert max(len(line) for line in text.splitlines()) <= 80
    wide = _screen(snap, ViewState(), 160)
    assert "3,483,812" in wide


def test_rows_scroll_and_counts_match_the_rows_shown() -> None:
    rows = [_row("s", p, hw=p) for p in range(30)]
    rows[3] = _row("s", 3, leader="s3", offline_reason="leader s3 does not answer", hw=None)
    rows[5] = _row("s", 5, isr=("s1",))
    internal = [_row("__groups", p, isr=("s1", "s2")) for p in range(16)]
    snap = Snapshot(time.time(), "s1", (), (), tuple(rows + internal), ())
    view = ViewState(page=10)
    text = _screen(snap, view, 160)
    shown = [line.split()[1] for line in text.splitlines() if line.startswith("s ")]
    assert shown == [str(p) for p in range(10)]
    assert "OFFLINE(s3)" in text
    # Counted over the 30 rows the filter shows, the 16 hidden internal ones apart.
    assert "30 partition(s), rows 1-10: 1 offline, 2 under-replicated" in text
    assert "internal (hidden): 16, 0 offline, 16 under-replicated" in text
    for char in keys_of("j\x1b[B\x1b[6~"):  # j, arrow down, PgDn: 1 + 1 + 10
        assert view.key(char)
    text = _screen(snap, view, 160)
    shown = [line.split()[1] for line in text.splitlines() if line.startswith("s ")]
    assert shown == [str(p) for p in range(12, 22)]
    view.key("G")
    text = _screen(snap, view, 160)
    assert "rows 21-30" in text
    view.key("g")
    assert _screen(snap, view, 160).count("rows 1-10") == 1
