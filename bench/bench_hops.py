"""The client's timeline of one message, and its hops: send -> socket write -> answer read
-> answer parsed -> caller resumed (``bench/client_hops.py``), on asyncio and trio, beside
nats-py's ``js.publish`` / ``publish_async`` + push subscription measured the same way.

One ``jet dev`` server of this tree and one JetStream nats-server (default sync); each round
runs the client as a subprocess with this tree's jetsdk (A) and, with
``JET_BENCH_AGAINST=<another jet work tree>``, that tree's jetsdk (B), alternating. Per
round and flow: p50 µs of each stage from the call, and the loop callbacks (task steps)
and loop iterations from the read of the answer to the caller running again (medians).
Run: ``python -m bench hops [--quick]`` (quick: 2 rounds of 300 messages, else 4 of 1,000).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from bench.bench_sdk import _load, jetstream_server
from bench.trees import HERE, compared_trees
from jetserver.testing.devcluster import DevCluster

SCRIPT = HERE / "bench" / "client_hops.py"


def _client(tree: Path, args: list[str], n: int) -> dict[str, dict[str, float]]:
    env = dict(os.environ, PYTHONPATH=str(tree / "sdk/python/src"))
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args, str(n)],
        env=env,
        capture_output=True,
        check=True,
        timeout=n * 0.2 + 120,
    )
    result: dict[str, dict[str, float]] = orjson.loads(out.stdout.splitlines()[-1])
    return result


STAGES = ("write", "read", "parsed", "resumed")
COUNTS = "{read_to_resumed_us:.0f} us, {steps:g} steps ({steps_mean:.2f} mean), {iters:g} turns"


def _line(tag: str, flow: str, row: dict[str, float]) -> str:
    stages = " ".join(f"{s} {row[s + '_us']:.0f}" for s in STAGES if s + "_us" in row)
    return f"  {tag:<16} {flow:<4} us from call: {stages}; read->resumed {COUNTS.format(**row)}"


def run(quick: bool) -> None:
    """Start the servers and alternate the clients' rounds (see the module docstring)."""
    rounds, n = (2, 300) if quick else (4, 1000)
    trees = compared_trees()
    named = "".join(f"; {tag} = {tree}" for tag, tree in trees.items())
    print(f"client timeline, one message at a time, 100 B, {rounds} x {n}{named} (load {_load()})")
    with (
        open(os.devnull, "wb") as devnull,
        DevCluster(size=1, log_file=devnull) as dev,
        jetstream_server(sync_always=False) as js_url,
    ):
        sides: list[tuple[str, Path, list[str]]] = [
            (f"jet {tag} {backend}", tree, ["jet", dev.addresses[0], backend])
            for tag, tree in trees.items()
            for backend in ("asyncio", "trio")
        ]
        sides.append(("nats-py asyncio", HERE, ["nats", js_url, "asyncio"]))
        for r in range(rounds):
            for name, tree, args in sides if r % 2 == 0 else sides[::-1]:
                for flow, row in _client(tree, args, n).items():
                    if row:
                        print(_line(f"r{r} {name}", flow, row) + f" (load {_load()})", flush=True)
