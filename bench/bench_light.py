"""One message at a time: publish -> consume latency at 500 msg/s and what it costs the server.

Short rounds alternate, in one client process on asyncio, among: jet fsynced (``flushed``),
jet ``written``, JetStream ``sync_interval: always`` and JetStream's default (the same
pairs as ``bench sdk`` (c)), with the order reversed every other round, so that a noisy,
shared machine disturbs every side alike. Per round it prints p50, p99 and max, the
server's CPU per message (user + system, /proc: the jet server process, which does not
count the CPU of the nats-server it publishes NATS copies to; for JetStream the whole
nats-server process), and for jet the context switches per message of
its event-loop thread (voluntary: it waited, e.g. for the socket or a thread; involuntary:
it was preempted), the client's CPU per message and the load average; then the medians
over the rounds.
Before the first round this process's heap is collected and frozen (:mod:`bench.heap`).

With ``JET_BENCH_AGAINST=<path of another jet work tree>`` a second jet server runs that
tree's code beside this one (``A`` = this tree, ``B`` = that one), in the same rounds: an
A/B of two builds on the same machine at the same moments. With ``JET_LIGHT_FSYNC_SIDES=1``
each tree runs three servers instead, ``<tag>loop`` (the default: the fsync on the event loop
when the runner allows it), ``<tag>thread`` (``[storage] fsync_on_loop = false``: every
fsync in a worker thread) and ``<tag>wait`` (``[storage] fsync_loop_wait_ms = 20``: the
loop's fsyncs in a thread it waits for, up to 20 ms), in the same rounds.
Run: ``python -m bench light [--quick]`` (quick: 3 rounds of 3 s, else 8 rounds of 4 s).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Any

import anyio

from bench.bench_sdk import (
    JETSTREAM_PIDS,
    _load,
    _process_cpu_s,
    jet_latency,
    jetstream_server,
    js_latency,
    js_setup,
)
from bench.heap import settle_heap
from bench.stats import pct
from bench.trees import compared_trees, running_tree
from jetsdk import Client
from jetsdk.client_requests import Durability
from jetserver.testing.devcluster import DevCluster

RATE = 500
"""Messages per second (100 B each)."""


def _switches(pid: int) -> tuple[int, int]:
    """Voluntary and involuntary context switches of the main (event-loop) thread of
    ``pid`` so far (worker threads come and go, so their counts cannot be compared)."""
    voluntary = involuntary = 0
    try:
        with open(f"/proc/{pid}/task/{pid}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches"):
                    voluntary = int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    involuntary = int(line.split()[1])
    except OSError:
        pass
    return voluntary, involuntary


async def jet_clients(
    stack: contextlib.AsyncExitStack,
    jets: dict[str, tuple[list[str], int]],
    streams: dict[str, tuple[str, Durability | None]],
    warm: tuple[str, ...],
) -> dict[str, Client]:
    """A client per tree's server (``jets``: tag -> (addresses, pid)), each server with
    ``streams`` (name -> (subject, durability)), each stream in ``warm`` warmed up by a
    second of publishes at ``RATE``."""
    clients: dict[str, Client] = {}
    for tag, (addresses, _pid) in jets.items():
        client = await stack.enter_async_context(Client(addresses))
        for name, (subject, durability) in streams.items():
            await client.create_stream(name, subject, durability=durability)
        for name in warm:
            await jet_latency(client, name, RATE, 1.0)
        clients[tag] = client
    return clients


async def _rounds(
    jets: dict[str, tuple[list[str], int]], js_url: str, js_sync_url: str, rounds: int, secs: float
) -> None:
    per: dict[str, list[tuple[float, float, float, float, float]]] = {}
    async with contextlib.AsyncExitStack() as stack:
        streams: dict[str, tuple[str, Durability | None]] = {
            "lf": ("light.f", None),
            "lw": ("light.w", "written"),
        }
        clients = await jet_clients(stack, jets, streams, warm=("lf",))
        nc, js = await js_setup(js_url, "LD", "js.ld")
        sync_nc, sync_js = await js_setup(js_sync_url, "LS", "js.ls")
        cases: list[tuple[str, str | None, Any]] = [
            (f"jet {tag} {d}", tag, stream)
            for stream, d in (("lf", "flushed"), ("lw", "written"))
            for tag in jets
        ]
        cases += [("js sync_always", None, sync_js), ("js default", None, js)]
        print(f"  {settle_heap()}")
        try:
            for r in range(rounds):
                for name, tag, target in cases if r % 2 == 0 else cases[::-1]:
                    mine = time.process_time()
                    switches = (float("nan"), float("nan"))
                    if tag is None:
                        subject = "js.ls" if target is sync_js else "js.ld"
                        pid = JETSTREAM_PIDS[js_sync_url if target is sync_js else js_url]
                        cpu0 = _process_cpu_s(pid)
                        lat = await js_latency(target, subject, RATE, secs)
                        cpu = (_process_cpu_s(pid) - cpu0) / len(lat) * 1e6
                    else:
                        pid = jets[tag][1]
                        cpu0, sw0 = _process_cpu_s(pid), _switches(pid)
                        lat = await jet_latency(clients[tag], target, RATE, secs)
                        sw1 = _switches(pid)
                        cpu = (_process_cpu_s(pid) - cpu0) / len(lat) * 1e6
                        switches = ((sw1[0] - sw0[0]) / len(lat), (sw1[1] - sw0[1]) / len(lat))
                    client_us = (time.process_time() - mine) / len(lat) * 1e6
                    p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
                    per.setdefault(name, []).append((p50, p99, cpu, client_us, switches[0]))
                    print(
                        f"  r{r} {name:<20} p50 {p50:6.2f} p99 {p99:7.2f} max {max(lat):7.1f} ms"
                        f"  server {cpu:5.0f} us/msg, switches/msg {switches[0]:.1f} vol "
                        f"{switches[1]:.1f} invol; client {client_us:4.0f} us/msg (load {_load()})",
                        flush=True,
                    )
        finally:
            await nc.close()
            await sync_nc.close()
    print(f"  medians over {rounds} rounds:")
    for name, values in per.items():
        med = [statistics.median(v[i] for v in values) for i in range(5)]
        print(
            f"    {name:<20} p50 {med[0]:.2f} p99 {med[1]:.2f} ms, p99/p50 {med[1] / med[0]:.1f};"
            f" server {med[2]:.0f} us/msg, {med[4]:.1f} voluntary switches/msg;"
            f" client {med[3]:.0f} us/msg"
        )


def _fsync_sides() -> list[tuple[str, dict[str, Any]]]:
    """The servers of each tree: one with its default settings, or with
    ``JET_LIGHT_FSYNC_SIDES=1`` the loop fsync's, the worker thread's and the waited
    thread's side by side."""
    if os.environ.get("JET_LIGHT_FSYNC_SIDES") != "1":
        return [("", {})]
    return [
        ("loop", {"storage": {"fsync_on_loop": True}}),
        ("thread", {"storage": {"fsync_on_loop": False}}),
        ("wait", {"storage": {"fsync_loop_wait_ms": 20.0}}),
    ]


def run(quick: bool) -> None:
    """Start the servers and alternate the rounds (see the module docstring)."""
    rounds, secs = (3, 3.0) if quick else (8, 4.0)
    trees = compared_trees()
    with contextlib.ExitStack() as stack:
        devnull = stack.enter_context(open(os.devnull, "wb"))
        jets: dict[str, tuple[list[str], int]] = {}
        for tag, tree in trees.items():
            for side, settings in _fsync_sides():
                with running_tree(tree):  # the server imports that tree's code
                    dev = stack.enter_context(
                        DevCluster(size=1, log_file=devnull, settings=settings)
                    )
                jets[tag + side] = (dev.addresses, dev.servers[0].pid)
        js_url = stack.enter_context(jetstream_server(sync_always=False))
        js_sync_url = stack.enter_context(jetstream_server(sync_always=True))
        print(
            f"publish -> consume at {RATE} msg/s, 100 B, {rounds} rounds of {secs:g} s per case"
            + "".join(f"; jet {tag} = {tree}" for tag, tree in trees.items())
            + f" (load {_load()})"
        )
        anyio.run(_rounds, jets, js_url, js_sync_url, rounds, secs, backend="asyncio")
