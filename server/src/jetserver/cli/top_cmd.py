"""``jet top``: a live terminal view of the cluster, refreshed every second (rich).

Shows the servers (up or down) and the metadata leader; per partition the leader, ISR
(under-replicated partitions in red), HW, LEO, in and out msg/s, replica lag and the
consumer groups' lag; and the groups with their lag. See :mod:`jetserver.observe.sampler`
for where each figure comes from.

Keys: ``q`` quits, ``s`` cycles the sort (stream, in, out, lag, hw), ``r`` reverses it,
``f`` types a stream filter (a glob, or a substring; Enter applies, Esc cancels), ``a``
shows the internal ``__groups`` stream, ``j``/``k`` (arrows), space/``b`` (PgDn/PgUp) and
``g``/``G`` scroll the partition rows. ``--stream`` and ``--sort`` set them at start.

Offline partitions (no live leader) show ``OFFLINE(<leader>)`` in red; the counts line
counts the rows shown, the hidden internal partitions apart. Figures are abbreviated
(``3.48M``) in a terminal narrower than 120 columns. Sampling runs beside the screen: a
server that stops answering costs a sample at most two seconds and never freezes the keys.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import termios
import time
import tty
from collections.abc import Iterator
from typing import Any

import anyio

from jetsdk import Client, JetError
from jetserver.cli.exit_codes import EXIT_OK
from jetserver.cli.stream_cmd import (
    client_command,
    client_factory,
    positive_float,
    run_with_client,
    servers_shown,
)

SORT_KEYS = ("stream", "in", "out", "lag", "hw")
"""``--sort`` choices (the same as :data:`jetserver.observe.top_view.SORT_KEYS`; rich is
imported only when ``jet top`` runs)."""

_KEY_POLL_S = 0.05


def register(subparsers: Any) -> None:
    """Add ``jet top``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "top",
        help="live view of streams, partitions and consumer groups",
        description="A live terminal view of the cluster, refreshed every --interval seconds. "
        "Keys: q quit, s sort, r reverse, f filter, a internal streams, j/k/space/b/g/G "
        "(arrows, PgUp/PgDn) scroll.",
    )
    p.add_argument("--stream", default="", metavar="FILTER", help="show matching streams only")
    p.add_argument("--sort", choices=SORT_KEYS, default="stream", help="initial sort")
    p.add_argument(
        "--interval", type=positive_float, default=1.0, metavar="SECONDS", help="default 1"
    )
    client_command(p, _top)


@contextlib.contextmanager
def _keys() -> Iterator[int | None]:
    """stdin's fd in cbreak mode (keys arrive one by one, unechoed), None if not a tty."""
    if not sys.stdin.isatty():
        yield None
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _read_keys(fd: int | None) -> str:
    if fd is None:
        return ""
    ready, _, _ = select.select([fd], [], [], 0)
    if not ready:
        return ""
    return os.read(fd, 64).decode("utf-8", "replace")


def _top(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from jetserver.observe.sampler import ClusterSampler
    from jetserver.observe.top_view import FIXED_LINES, ViewState, keys_of, render

    view = ViewState(sort=args.sort, filter=args.stream)
    shown = servers_shown(args)
    factory = client_factory(args)

    async def body(client: Client) -> int:
        console = Console()
        state: dict[str, Any] = {"snap": None, "error": None, "fresh": False}

        async def sample_loop(sampler: ClusterSampler) -> None:
            # Apart from the keys and the screen: a sample that waits for a server that
            # stopped answering (bounded per server) does not freeze either.
            while True:
                began = time.monotonic()
                try:
                    state["snap"], state["error"] = await sampler.sample(), None
                except JetError as exc:
                    state["error"] = f"{type(exc).__name__}: {exc}"
                state["fresh"] = True
                await anyio.sleep(max(0.0, args.interval - (time.monotonic() - began)))

        def draw(live: Live) -> None:
            size = console.size
            view.page = max(1, size.height - FIXED_LINES - _group_lines(state["snap"], view))
            screen = render(state["snap"], view, shown, state["error"], width=size.width)
            live.update(screen, refresh=True)

        with (
            _keys() as fd,
            Live(console=console, screen=True, auto_refresh=False, transient=True) as live,
        ):
            async with ClusterSampler(client, factory) as sampler, anyio.create_task_group() as tg:
                tg.start_soon(sample_loop, sampler)
                draw(live)
                while True:
                    keys = keys_of(_read_keys(fd)) if view.typing is None else list(_read_keys(fd))
                    for char in keys:
                        if not view.key(char):
                            tg.cancel_scope.cancel()
                            return EXIT_OK
                    if keys or state["fresh"]:
                        state["fresh"] = False
                        draw(live)
                    await anyio.sleep(_KEY_POLL_S)
        return EXIT_OK

    return run_with_client(args, body)


def _group_lines(snap: Any, view: Any) -> int:
    """Screen lines the groups table takes (header, blank line, one per group shown)."""
    if snap is None:
        return 0
    shown = [g for g in snap.groups if any(view.matches(p.stream) for p in g.partitions)]
    return len(shown) + 2 if shown else 0
