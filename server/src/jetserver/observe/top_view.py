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

from jetserver.observe.sampler import PartitionRow, Snapshot

SORT_KEYS = ("stream", "in", "out", "lag", "hw")
"""``s`` cycles through these."""
INTERNAL_PREFIX = "__"
"""Streams hidden unless ``--all`` (``__groups``)."""


@attrs.define
class ViewState:
    """The user's choices: sort key and order, stream filter, and the filter being typed."""

    sort: str = "stream"
    reverse: bool = False
    filter: str = ""
    typing: str | None = None
    """The filter being typed after ``f`` (None: not typing)."""
    show_internal: bool = False

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


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _num(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


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


def render(snap: Snapshot | None, view: ViewState, servers: str, error: str | None = None) -> Group:
    """The whole screen."""
    clock = time.strftime("%H:%M:%S", time.localtime(snap.at if snap else time.time()))
    order = "desc" if view.reverse else "asc"
    head = Text.assemble(
        ("jet top", "bold"),
        f"  {servers}  {clock}  sort: {view.sort} ({order})  filter: ",
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
        ("REPL LAG", "right"),
        ("GROUP LAG", "right"),
        ("SIZE", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        isr = ",".join(r.isr) or "-"
        lag_values = [v for v in r.replica_lag.values() if v is not None]
        repl = (
            "-"
            if not r.replica_lag
            else (f"{max(lag_values):,}" if lag_values else "?")
            + ("" if len(lag_values) == len(r.replica_lag) else "+?")
        )
        style = "bold red" if r.under_replicated or r.offline else None
        table.add_row(
            r.stream,
            str(r.partition),
            r.leader or "NONE",
            isr + (f" ({len(r.isr)}/{len(r.replicas)})" if r.under_replicated else ""),
            _num(r.hw),
            _num(r.leo),
            _rate(r.in_rate),
            _rate(r.out_rate),
            repl,
            _num(lags.get((r.stream, r.partition))),
            _num(r.size_bytes),
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
                " ".join(f"{p.stream}/{p.partition}={_num(p.lag)}" for p in g.partitions[:8])
                + (" ..." if len(g.partitions) > 8 else ""),
                _num(g.lag),
            )
        parts.append(Text(""))
        parts.append(gt)
    under = sum(1 for r in snap.partitions if r.under_replicated)
    footer = Text(
        f"{len(rows)} partition(s) shown, {under} under-replicated   "
        "q quit  s sort  r reverse  f filter  a internal streams",
        style="dim",
    )
    parts.append(footer)
    return Group(*parts)
