"""What ``jet top`` draws: a pure function of a :class:`Snapshot` and the view settings
(sort, order, filter), so that it can be checked without a terminal."""

from __future__ import annotations

import fnmatch
import time
from typing import Any

import attrs
from rich.console import Group
from rich.table import Table
from rich.text import Text

from jetsdk.metadata import INTERNAL_PREFIX
from jetserver.observe.sampler import PartitionRow, Snapshot

SORT_KEYS = ("stream", "in", "out", "lag", "hw")
"""``s`` cycles through these."""
SCROLL_KEYS = "jk bgG"
"""j/k one row down/up, space/b a page, g/G top/bottom (arrows and PgUp/PgDn map to
them, see :func:`keys_of`)."""
NARROW_COLUMNS = 120
"""Below this width figures are abbreviated (``3.48M``)."""
FIXED_LINES = 6
"""Screen lines besides the partition rows: title, status, table header, counts, keys,
and one spare."""
_ESCAPES = {"\x1b[A": "k", "\x1b[B": "j", "\x1b[5~": "b", "\x1b[6~": " ", "\x1b[H": "g"}


def keys_of(typed: str) -> list[str]:
    """Split what the terminal sent into keys, arrow and page keys mapped to j/k/space/b/g
    (outside a filter being typed, where Esc cancels)."""
    out = []
    i = 0
    while i < len(typed):
        for seq, key in _ESCAPES.items():
            if typed.startswith(seq, i):
                out.append(key)
                i += len(seq)
                break
        else:
            out.append(typed[i])
            i += 1
    return out


def compact(value: float) -> str:
    """``3,483,812`` -> ``3.48M``: at most 5 characters for any figure (below 10,000 as
    is)."""
    if value < 10_000:
        return f"{value:,.0f}"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale * 0.9995:
            scaled = value / scale
            if scaled >= 999.5 and unit != "G":
                continue
            digits = 2 if scaled < 10 else 1 if scaled < 100 else 0
            return f"{scaled:.{digits}f}{unit}"
    return f"{value:,.0f}"


@attrs.define
class ViewState:
    """The user's choices: sort key and order, stream filter, and the filter being typed."""

    sort: str = "stream"
    reverse: bool = False
    filter: str = ""
    typing: str | None = None
    """The filter being typed after ``f`` (None: not typing)."""
    show_internal: bool = False
    offset: int = 0
    """First partition row shown (scrolling)."""
    page: int = 10
    """Rows that fit the screen (set from the terminal's height before each render)."""

    def key(self, char: str) -> bool:
        """Apply one key press; False when it asks to quit."""
        if self.typing is not None:
            if char in ("\r", "\n"):
                self.filter, self.typing = self.typing, None
            elif char == "\x1b":
                self.typing = None
            elif char in ("\x7f", "\b"):
                self.typing = self.typing[:-1]
            elif char.isprintable():
                self.typing += char
            return True
        if char in ("q", "Q", "\x03"):
            return False
        if char == "s":
            self.sort = SORT_KEYS[(SORT_KEYS.index(self.sort) + 1) % len(SORT_KEYS)]
            self.reverse = self.sort != "stream"  # figures: largest first
        elif char == "r":
            self.reverse = not self.reverse
        elif char == "f":
            self.typing = ""
        elif char == "a":
            self.show_internal = not self.show_internal
        elif char in SCROLL_KEYS:
            step = {"j": 1, "k": -1, " ": self.page, "b": -self.page, "g": -(10**9)}
            self.offset = max(0, self.offset + step.get(char, 10**9))
        return True

    def matches(self, stream: str) -> bool:
        """Whether ``stream`` passes the filter (a glob, or a substring without wildcards)."""
        if stream.startswith(INTERNAL_PREFIX) and not self.show_internal:
            return False
        if not self.filter:
            return True
        if any(c in self.filter for c in "*?["):
            return fnmatch.fnmatchcase(stream, self.filter)
        return self.filter in stream


def _rate(value: float | None, narrow: bool = False) -> str:
    if value is None:
        return "-"
    return compact(value) if narrow else f"{value:,.0f}"


def _num(value: int | None, narrow: bool = False) -> str:
    if value is None:
        return "-"
    return compact(value) if narrow else f"{value:,}"


def group_lag_by_partition(snap: Snapshot) -> dict[tuple[str, int], int]:
    """Sum of the groups' lag per (stream, partition)."""
    out: dict[tuple[str, int], int] = {}
    for g in snap.groups:
        for p in g.partitions:
            if p.lag is not None:
                key = (p.stream, p.partition)
                out[key] = out.get(key, 0) + p.lag
    return out


def _sort_key(view: ViewState, lags: dict[tuple[str, int], int]) -> Any:
    def key(row: PartitionRow) -> Any:
        primary: Any = {
            "stream": 0,
            "in": row.in_rate or 0.0,
            "out": row.out_rate or 0.0,
            "lag": lags.get((row.stream, row.partition), 0),
            "hw": row.hw or 0,
        }[view.sort]
        return (primary, row.stream, row.partition)

    return key


def render(
    snap: Snapshot | None,
    view: ViewState,
    servers: str,
    error: str | None = None,
    width: int = 200,
) -> Group:
    """The whole screen (``width``: the terminal's columns; below NARROW_COLUMNS figures
    are abbreviated). Shows ``view.page`` partition rows from ``view.offset`` (clamped)."""
    narrow = width < NARROW_COLUMNS
    clock = time.strftime("%H:%M:%S", time.localtime(snap.at if snap else time.time()))
    order = "desc" if view.reverse else "asc"
    head = Text.assemble(
        ("jet top", "bold"),
        # Narrow: without the server list, so that the line does not wrap.
        f"  {clock}  " if narrow else f"  {servers}  {clock}  ",
        f"sort: {view.sort} ({order})  filter: ",
        (view.filter or "-", "bold"),
    )
    parts: list[Any] = [head]
    if view.typing is not None:
        parts.append(Text(f"filter> {view.typing}_", style="bold yellow"))
    if error is not None:
        parts.append(Text(f"error: {error}", style="bold red"))
    if snap is None:
        parts.append(Text("waiting for the first sample..."))
        return Group(*parts)
    status = Text("metadata leader: ")
    status.append(snap.metadata_leader or "NONE", style="bold")
    status.append("   servers: ")
    for s in snap.servers:
        status.append(f"{s['id']} ", style="green" if s["up"] else "bold red")
        status.append("up  " if s["up"] else "DOWN  ", style="green" if s["up"] else "bold red")
    parts.append(status)
    lags = group_lag_by_partition(snap)
    rows = sorted(
        (r for r in snap.partitions if view.matches(r.stream)),
        key=_sort_key(view, lags),
        reverse=view.reverse,
    )
    view.offset = max(0, min(view.offset, len(rows) - view.page))
    window = rows[view.offset : view.offset + view.page]
    table = Table(expand=False, box=None, header_style="bold reverse", pad_edge=False)
    for name, justify in (
        ("STREAM", "left"),
        ("P", "right"),
        ("LEADER", "left"),
        ("ISR", "left"),
        ("HW", "right"),
        ("LEO", "right"),
        ("IN/S", "right"),
        ("OUT/S", "right"),
        ("RLAG" if narrow else "REPL LAG", "right"),
        ("GLAG" if narrow else "GROUP LAG", "right"),
        ("SIZE", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for r in window:
        isr = ",".join(r.isr) or "-"
        lag_values = [v for v in r.replica_lag.values() if v is not None]
        repl = (
            "-"
            if not r.replica_lag
            else (_num(max(lag_values), narrow) if lag_values else "?")
            + ("" if len(lag_values) == len(r.replica_lag) else "+?")
        )
        style = "bold red" if r.under_replicated or r.offline else None
        leader = r.leader or "NONE"
        if r.is_offline:
            leader = f"OFFLINE({r.leader})" if r.leader else "OFFLINE"
        table.add_row(
            r.stream,
            str(r.partition),
            leader,
            isr + (f" ({len(r.isr)}/{len(r.replicas)})" if len(r.isr) < len(r.replicas) else ""),
            _num(r.hw, narrow),
            _num(r.leo, narrow),
            _rate(r.in_rate, narrow),
            _rate(r.out_rate, narrow),
            repl,
            _num(lags.get((r.stream, r.partition)), narrow),
            _num(r.size_bytes, narrow),
            style=style,
        )
    parts.append(table if rows else Text("no stream matches"))
    groups = [g for g in snap.groups if any(view.matches(p.stream) for p in g.partitions)]
    if groups:
        gt = Table(box=None, header_style="bold reverse", pad_edge=False)
        for name in ("GROUP", "MEMBERS", "PARTITIONS", "LAG"):
            gt.add_column(name, justify="right" if name in ("MEMBERS", "LAG") else "left")
        for g in groups:
            gt.add_row(
                g.name,
                str(len(g.members)),
                " ".join(
                    f"{p.stream}/{p.partition}={_num(p.lag, narrow)}" for p in g.partitions[:8]
                )
                + (" ..." if len(g.partitions) > 8 else ""),
                _num(g.lag, narrow),
            )
        parts.append(Text(""))
        parts.append(gt)
    parts.append(_counts(snap, rows, view, narrow))
    scroll = "  j/k/space/b scroll" if len(rows) > len(window) else ""
    parts.append(
        Text(
            "q quit  s sort  r reverse  f filter  a internal streams" + scroll,
            style="dim",
        )
    )
    return Group(*parts)


def _counts(snap: Snapshot, rows: list[PartitionRow], view: ViewState, narrow: bool) -> Text:
    """The counts line: of the rows the filter shows (offline ones in red), then those of
    the internal partitions hidden, apart (shorter words when ``narrow``)."""
    under_word = "under-repl." if narrow else "under-replicated"
    offline = sum(1 for r in rows if r.is_offline)
    under = sum(1 for r in rows if r.under_replicated)
    shown = len(rows)
    first = view.offset + 1 if rows else 0
    last = min(view.offset + view.page, shown)
    scrolled = last - first + 1 < shown
    if narrow:
        where = f"{shown} rows" + (f", {first}-{last}" if scrolled else "")
    else:
        where = f"{shown} partition(s)" + (f", rows {first}-{last}" if scrolled else "")
    line = Text(f"{where}: ")
    line.append(f"{offline} offline", style="bold red" if offline else None)
    line.append(", ")
    line.append(f"{under} {under_word}", style="bold red" if under else None)
    hidden = [r for r in snap.partitions if r.internal and not view.show_internal]
    if hidden:
        h_off = sum(1 for r in hidden if r.is_offline)
        h_under = sum(1 for r in hidden if r.under_replicated)
        label = f"  internal {len(hidden)}:" if narrow else f"   internal (hidden): {len(hidden)},"
        line.append(
            f"{label} {h_off} offline, {h_under} {under_word}",
            style="bold red" if h_off or h_under else "dim",
        )
    return line
