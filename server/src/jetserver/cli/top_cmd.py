"""``jet top``: a live terminal view of the cluster, refreshed every second (rich).

Shows the servers (up or down) and the metadata leader; per partition the leader, ISR
(under-replicated partitions in red), HW, LEO, in and out msg/s, replica lag and the
consumer groups' lag; and the groups with their lag. See :mod:`jetserver.observe.sampler`
for where each figure comes from.

Keys: ``q`` quits, ``s`` cycles the sort (stream, in, out, lag, hw), ``r`` reverses it,
``f`` types a stream filter (a glob, or a substring; Enter applies, Esc cancels), ``a``
shows the internal ``__groups`` stream. ``--stream`` and ``--sort`` set them at start.
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
from jetserver.cli.security_opts import security_kwargs
from jetserver.cli.stream_cmd import EXIT_OK, add_client_options, positive_float, run_with_client

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
        "Keys: q quit, s sort, r reverse, f filter, a internal streams.",
    )
    p.add_argument("--stream", default="", metavar="FILTER", help="show matching streams only")
    p.add_argument("--sort", choices=SORT_KEYS, default="stream", help="initial sort")
    p.add_argument(
        "--interval", type=positive_float, default=1.0, metavar="SECONDS", help="default 1"
    )
    add_client_options(p)
    p.set_defaults(func=_top)


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

    from jetserver.observe.sampler import ClusterSampler, Snapshot
    from jetserver.observe.top_view import ViewState, render

    view = ViewState(sort=args.sort, filter=args.stream)
    kwargs = security_kwargs(args)
    shown = args.servers or os.environ.get("JET_SERVERS", "127.0.0.1:9292")

    def factory(servers: list[str] | None, timeout: float) -> Client:
        return Client(servers or args.servers, connect_timeout=timeout, **kwargs)

    async def body(client: Client) -> int:
        console = Console()
        snap: Snapshot | None = None
        error: str | None = None
        with (
            _keys() as fd,
            Live(console=console, screen=True, auto_refresh=False, transient=True) as live,
        ):
            async with ClusterSampler(client, factory) as sampler:
                while True:
                    try:
                        snap, error = await sampler.sample(), None
                    except JetError as exc:
                        error = f"{type(exc).__name__}: {exc}"
                    live.update(render(snap, view, shown, error), refresh=True)
                    until = time.monotonic() + args.interval
                    while time.monotonic() < until:
                        keys = _read_keys(fd)
                        for char in keys:
                            if not view.key(char):
                                return EXIT_OK
                        if keys:
                            live.update(render(snap, view, shown, error), refresh=True)
                        await anyio.sleep(_KEY_POLL_S)

    return run_with_client(args, body)
