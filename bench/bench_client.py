"""The client's side of one message: CPU, context switches and Python calls per message of
a Producer + Consumer process, one message at a time (``bench/client_round.py``).

One ``jet dev`` server of this tree (``flushed`` and ``written`` streams); each round runs
the client as a subprocess with this tree's jetsdk (A) and, with
``JET_BENCH_AGAINST=<another jet work tree>``, that tree's jetsdk (B), in alternating
order, against the same server: an A/B of the SDK alone. Per round: the client's CPU per
message (user + system, and user alone), switches per message, p50/p99; the last round of
each side runs under cProfile for the Python calls per message (its CPU is not counted).
Then the medians. Run: ``python -m bench client [--quick]`` (quick: 3 rounds of 1,000
messages, else 6 of 1,500).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
from pathlib import Path

import orjson

from bench.bench_sdk import _load
from bench.trees import HERE, compared_trees
from jetserver.testing.devcluster import DevCluster

ROUND = HERE / "bench" / "client_round.py"


def _client(tree: Path, address: str, durability: str, n: int, profile: bool) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree / "sdk/python/src"))
    args = [sys.executable, str(ROUND), address, f"client_{durability}", durability, str(n)]
    out = subprocess.run(
        args + (["profile"] if profile else []),
        env=env,
        capture_output=True,
        check=True,
        timeout=n * 0.1 + 120,
    )
    result: dict[str, float] = orjson.loads(out.stdout.splitlines()[-1])
    return result


def run(quick: bool) -> None:
    """Start the server and alternate the clients' rounds (see the module docstring)."""
    rounds, n = (3, 1000) if quick else (6, 1500)
    trees = compared_trees()
    print(
        f"client side of one message at a time, 100 B, {rounds} rounds of {n} messages"
        + "".join(f"; {tag} = {tree}" for tag, tree in trees.items())
        + f" (load {_load()})"
    )
    with contextlib.ExitStack() as stack:
        devnull = stack.enter_context(open(os.devnull, "wb"))
        dev = stack.enter_context(DevCluster(size=1, log_file=devnull))
        address = dev.addresses[0]
        for durability in ("written", "flushed"):
            per: dict[str, list[dict[str, float]]] = {tag: [] for tag in trees}
            calls: dict[str, float] = {}
            for r in range(rounds + 1):
                order = list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]
                for tag, tree in order:
                    profile = r == rounds
                    res = _client(tree, address, durability, n, profile)
                    if profile:
                        calls[tag] = res["calls"]
                        continue
                    per[tag].append(res)
                    print(
                        f"  r{r} {tag} {durability:<8} client {res['cpu_us']:5.0f} us/msg"
                        f" (user {res['user_us']:4.0f}), switches/msg {res['switches']:.1f},"
                        f" p50 {res['p50']:.2f} p99 {res['p99']:.2f} ms (load {_load()})",
                        flush=True,
                    )
            for tag, results in per.items():
                med = {k: statistics.median(x[k] for x in results) for k in results[0]}
                print(
                    f"    {tag} {durability:<8} median client {med['cpu_us']:.0f} us/msg"
                    f" (user {med['user_us']:.0f}), {med['switches']:.1f} switches/msg,"
                    f" p50 {med['p50']:.2f} p99 {med['p99']:.2f} ms;"
                    f" Python calls/msg {calls[tag]:.0f} (cProfile round)"
                )
