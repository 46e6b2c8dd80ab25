"""What the worker processes of bench_groups and bench_share share: the start handshake with
the coordinator (a ``ready`` line, then wait for the go file), a producer paced to a rate,
and the counts a consuming worker reports (``progress`` lines every 0.1 s, one ``result``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson

PROGRESS_EVERY_S = 0.1
"""Seconds between two ``progress`` lines of a consuming worker."""


def wait_go(go: Path) -> None:
    """Block until the coordinator creates ``go``."""
    while not go.exists():
        time.sleep(0.002)


def ready(out: Any, go: Path) -> None:
    """Tell the coordinator this worker is ready, then wait for its go."""
    out.write("ready\n")
    out.flush()
    wait_go(go)


async def send_paced(send: Callable[[], Awaitable[object]], rate: float, stop: Path) -> None:
    """Call ``send`` ``rate`` times a second (on average, from now) until ``stop`` exists."""
    start, i = time.perf_counter(), 0
    while not stop.exists():  # noqa: ASYNC240 - a stat per message
        await send()
        i += 1
        pause = start + i / rate - time.perf_counter()
        if pause > 0:
            await anyio.sleep(pause)


async def js_fetch(sub: Any, batch: int) -> list[Any]:
    """Up to ``batch`` messages of a JetStream pull subscription (none after 0.2 s)."""
    import nats.errors

    try:
        msgs: list[Any] = await sub.fetch(batch=batch, timeout=0.2)
    except (nats.errors.TimeoutError, TimeoutError):
        return []
    return msgs


class Tally:
    """A consuming worker's count, the time of its first and last message, and its report
    lines on ``out`` (read by the coordinator)."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self._next_progress = 0.0

    def got(self, n: int, at: float, last: float) -> None:
        """``n`` messages received at ``at`` (0: none), done with at ``last``."""
        if n:
            self.count += n
            self.first = self.first or at
            self.last = last

    def progress(self, now: float) -> None:
        """A ``progress`` line if the last is :data:`PROGRESS_EVERY_S` old."""
        if now >= self._next_progress:
            self.out.write(f"progress {self.count}\n")
            self.out.flush()
            self._next_progress = now + PROGRESS_EVERY_S

    def result(self) -> None:
        """The final ``progress`` and ``result`` lines."""
        self.out.write(f"progress {self.count}\n")
        result = {"count": self.count, "first": self.first, "last": self.last}
        self.out.write("result " + orjson.dumps(result).decode())
        self.out.write("\n")


@asynccontextmanager
async def js_pull(spec: dict[str, Any], out: Any) -> AsyncIterator[tuple[Any, Tally]]:
    """A JetStream worker's pull subscription to ``spec``'s durable (``url``, ``durable``,
    ``js_stream``) and its tally, once the coordinator said go (``go``); the tally's result
    is written when the block ends without an error."""
    import nats

    nc = await nats.connect(spec["url"])
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe_bind(durable=spec["durable"], stream=spec["js_stream"])
        ready(out, Path(spec["go"]))
        tally = Tally(out)
        yield sub, tally
        tally.result()
    finally:
        await nc.close()
