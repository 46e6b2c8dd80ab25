"""The failover watch of ``bench scale_cluster``: after a kill -9, when the metadata names a
live leader for every partition again, and when each new leader first serves.

It has to measure the survivors without being a load of its own: on a 2-core machine its
CPU is taken from them. Until 2026-11-30 it polled the metadata through the SDK ten times
a second (each answer decoded into ~10,000 checked ``PartitionInfo`` objects) and spawned a
task per partition to probe every ``POLL_S``, each waiting on a limiter: at 3,000
partitions (load 8) the watch used 2.67 s of CPU against the survivors' 1.04 and 1.09 s,
most of it the SDK's metadata decoding and the queued probe tasks; at 10,000 about half a
core. Now:

- **Metadata** is requested on connections of the watch's own (one per survivor, each
  dialled again until it answers Hello: a survivor busy with the failover may not for
  seconds) and read with orjson for the three fields used (leader, leader epoch, ISR),
  without the SDK's checked objects.
- **Probes** (ListOffsets, answered only by a leader that applied its role,
  spec/protocol.md) go per survivor, for the partitions the last metadata says it leads
  and those it does not show moved yet, as the create path's readiness wait does
  (jetserver.cluster.forwarding): one partition at a time while none of that survivor's
  new partitions serves yet (a different one each time, paced from ``SENTINEL_PAUSE_S``
  doubling to ``SENTINEL_PAUSE_MAX_S``), then, once one answers, a sweep of all its
  others by ``PROBE_IN_FLIGHT`` workers; what did not answer waits for the next sentinel.
  A partition counts as served at the time its own probe's answer came. The probes cost
  one or two per partition (two while the metadata has not shown it moved: each survivor
  is asked) and one per sweep for each that did not answer yet, instead of one per
  partition per ``POLL_S``; a new leader is seen serving at most a sentinel pause plus a
  sweep after it does.
- **A sweep is one round trip**, not one per ``PROBE_IN_FLIGHT``: up to 1,024 probes are
  in flight at once (the server answers each in its own task, in one pass of its loop),
  and a probe waits ``PROBE_TIMEOUT_S`` (10 s) for its answer. Until 2026-11-30 a sweep
  had 32 in flight and a 2 s timeout: a survivor's 500-1,667 new leaders took 16-52
  round trips, each as long as a pass of a busy survivor's loop (under load: the
  scheduler's wake-up latency of the survivor and of the watch), and an answer later than
  2 s counted as not served. A hop trace of the survivors (``JET_HOP_TRACE`` with a mark
  per ListOffsets answered; 3,000 partitions, load 13.7) showed each answering the probes
  as they came, 32 per 0.5 s, with 0.02-0.05 s of its loop's CPU in each 0.5 s, for 4 s
  after every role was taken; one survivor's sentinel was answered three times, 1.5-2 s
  apart, before its sweep began (the spacing of a 2 s timeout: answered, not seen).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

import anyio
import attrs
import orjson

from jetsdk.client_dial import greet
from jetsdk.client_requests import list_offsets_body
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import encode_json
from jetsdk.connection import Connection
from jetsdk.errors import JetError
from jetsdk.transport import parse_address, tcp_dialer

State = dict[tuple[str, int], tuple[str | None, int, tuple[str, ...]]]
"""(stream, partition) -> (leader, leader epoch, ISR)."""

FAILOVER_BOUND_S = 120.0
"""Give up waiting for leaders after this."""
POLL_S = 0.1
"""Period of the watch's Metadata requests until the metadata names a live leader for
every partition."""
METADATA_POLL_MOVED_S = 1.0
"""Period of the watch's Metadata requests once every partition had a live leader (a
later election still shows)."""
PROBE_IN_FLIGHT = int(os.environ.get("JET_BENCH_WATCH_PROBES", "1024"))
"""ListOffsets probes in flight at once to one survivor during a sweep
(``JET_BENCH_WATCH_PROBES`` sets another)."""
PROBE_TIMEOUT_S = 10.0
"""A probe's answer counts however late it comes within this (at the time it came)."""
SENTINEL_PAUSE_S = 0.02
"""First pause after a survivor's sentinel probe was not answered (it doubles)."""
SENTINEL_PAUSE_MAX_S = 0.1
"""Longest pause between two sentinel probes of one survivor."""
CONNECT_TIMEOUT_S = 5.0


@attrs.define
class Watch:
    """What a failover's watch saw (:func:`watch_failover`)."""

    timeline: list[tuple[float, int, int]] = attrs.field(factory=list)
    """(seconds from the kill, partitions left in the metadata, not yet serving)."""
    now: State = attrs.field(factory=dict)
    """The last metadata."""
    moved_s: float | None = None
    """When the metadata first named a live leader for every partition."""
    served: dict[tuple[str, int], float] = attrs.field(factory=dict)
    """When each moved partition's new leader first answered a probe (its answer's time)."""
    probes: int = 0
    """ListOffsets probes sent."""
    sweeps: int = 0
    """Sweeps of a survivor's partitions after one of them answered."""
    metadata_s: list[float] = attrs.field(factory=list)
    """Duration of each Metadata request (with the watch's reading of the answer)."""
    failed: dict[str, int] = attrs.field(factory=dict)
    """Probes not answered with offsets, by the error's name (``Timeout``: no answer within
    ``PROBE_TIMEOUT_S``; else the survivor's error, e.g. NOT_LEADER)."""
    slowest_s: float = 0.0
    """The longest a probe waited for its answer (or its timeout)."""


def state_of(answer: bytes, prefix: str = "s") -> State:
    """The (leader, leader epoch, ISR) of every partition of the streams named with
    ``prefix`` in a Metadata answer's body."""
    out: State = {}
    for info in orjson.loads(answer)["streams"]:
        name = info["name"]
        if name.startswith(prefix):
            for p in info["partitions"]:
                out[(name, p["partition"])] = (p["leader"], p["leader_epoch"], tuple(p["isr"]))
    return out


async def _connect(
    address: str, tg: anyio.abc.TaskGroup, until: Callable[[], bool]
) -> Connection | None:
    """A connection to ``address`` (tried again every ``POLL_S`` while it fails: a
    survivor busy with the failover may not answer Hello for seconds), or None once
    ``until()``."""
    while not until():
        try:
            stream = await tcp_dialer(parse_address(address), CONNECT_TIMEOUT_S)
        except JetError:
            await anyio.sleep(POLL_S)
            continue
        conn = Connection(stream, label=address)
        await tg.start(conn.run)
        try:
            await greet(
                conn, client_name="bench-watch", credentials=None, timeout=CONNECT_TIMEOUT_S
            )
        except JetError:
            await conn.aclose()
            await anyio.sleep(POLL_S)
            continue
        return conn
    return None


async def watch_failover(
    survivors: dict[str, str],
    settled: State,
    victim: str,
    alone: set[tuple[str, int]],
    started: float,
) -> Watch:
    """Watch the failover of ``victim`` (``survivors``: server id -> client address) from
    ``started`` (``perf_counter``) until every moved partition serves or
    ``FAILOVER_BOUND_S`` (see the module docstring)."""
    moving = {k for k, v in settled.items() if v[0] == victim and k not in alone}
    w = Watch(now=settled)

    def elapsed() -> float:
        return time.perf_counter() - started

    def done() -> bool:
        return len(w.served) >= len(moving) or elapsed() >= FAILOVER_BOUND_S

    async with anyio.create_task_group() as tg:
        conns: dict[str, Connection] = {}  # each survivor connects in its follow task

        async def probe(conn: Connection, key: tuple[str, int]) -> bool:
            w.probes += 1
            sent = elapsed()
            try:
                body = list_offsets_body(key[0], key[1], "latest")
                await conn.request(Api.LIST_OFFSETS, body, timeout=PROBE_TIMEOUT_S)
            except JetError as exc:
                name = getattr(getattr(exc, "code", None), "name", None) or type(exc).__name__
                w.failed[name] = w.failed.get(name, 0) + 1
                return False
            finally:
                w.slowest_s = max(w.slowest_s, elapsed() - sent)
            w.served.setdefault(key, elapsed())
            return True

        async def sweep(conn: Connection, keys: Sequence[tuple[str, int]]) -> None:
            w.sweeps += 1
            it = iter(keys)

            async def worker() -> None:
                for key in it:
                    await probe(conn, key)

            async with anyio.create_task_group() as workers:
                for _ in range(min(PROBE_IN_FLIGHT, len(keys))):
                    workers.start_soon(worker)

        async def follow(sid: str, address: str) -> None:
            """Connect to ``sid`` and probe the partitions the metadata says it now leads
            (see the module docstring)."""
            conn = await _connect(address, tg, done)
            if conn is None:
                return
            conns[sid] = conn
            pause, turn = SENTINEL_PAUSE_S, 0
            while not done():
                now = w.now
                # Those it leads in the last metadata, and those whose new leader the
                # watch's metadata does not show yet: a survivor busy taking its roles
                # answers Metadata late too, and that must not delay seeing it serve.
                mine = (sid, None, victim)
                pending = [k for k in moving if k not in w.served and now[k][0] in mine]
                if not pending:
                    await anyio.sleep(POLL_S)
                    continue
                turn += 1
                sentinel = pending[turn % len(pending)]
                if not await probe(conn, sentinel):
                    await anyio.sleep(pause)
                    pause = min(pause * 2, SENTINEL_PAUSE_MAX_S)
                    continue
                pause = SENTINEL_PAUSE_S
                await sweep(conn, [k for k in pending if k != sentinel])

        async def metadata() -> State | None:
            """The metadata from a connected survivor (the next if one fails); None if
            none answered."""
            body = encode_json({"streams": None})
            for conn in list(conns.values()):
                try:
                    return state_of(await conn.request(Api.METADATA, body, timeout=5.0))
                except JetError:
                    continue
            return None

        def left() -> int:
            return sum(1 for k, v in w.now.items() if k not in alone and v[0] in (None, victim))

        asked_meta = -METADATA_POLL_MOVED_S
        for sid, address in survivors.items():
            tg.start_soon(follow, sid, address)
        while not done():
            if w.moved_s is None or elapsed() - asked_meta >= METADATA_POLL_MOVED_S:
                asked = elapsed()
                now = await metadata()
                if now is not None:  # else asked again at the next turn
                    w.now, asked_meta = now, asked
                    w.metadata_s.append(elapsed() - asked)
            t = elapsed()
            if not left() and w.moved_s is None:
                w.moved_s = t
            w.timeline.append((t, left(), len(moving) - len(w.served)))
            if not left() and len(w.served) >= len(moving):
                break
            await anyio.sleep(POLL_S)
        tg.cancel_scope.cancel()
    return w
