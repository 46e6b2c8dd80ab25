"""Where keyed produce to many partitions spends its CPU: ``python -m bench fanout``.

Issue 34 item 4 (keyed produce to 500 partitions at >= 0.8x of produce to one). Each round
runs ``bench/fanout_round.py`` in a process of its own against a fresh one-server
``jet dev``: keyed produce of 20,000 x 100 B (ack LEADER) to 500 partitions, then to one,
and prints per message: the client's CPU, the server's (the whole process, and its
event-loop thread alone; the rest is its fsync threads), and per request the server's
voluntary context switches, the messages per request and per ProduceMany section (the
producer's fan-in counters). A rate on a shared machine is noise; these are much less so,
but still read the medians of interleaved rounds, not one.

With ``JET_BENCH_AGAINST=<another jet work tree>`` the rounds alternate between this tree
(``A``) and that one (``B``), client and server each of its tree, A first in even rounds.
``JET_FANOUT_ROUNDS`` (default 4; quick 2), ``JET_FANOUT_MESSAGES`` (default 20,000) and
``JET_FANOUT_PARTITIONS`` (default 500) change the sizes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench.trees import HERE, compared_trees, tree_paths

ROUND_BOUND_S = 900.0
"""Bound on one round (its process is killed past it)."""
FIGURES = (
    "client_us",
    "server_us",
    "server_loop_us",
    "server_switches_per_request",
    "messages_per_request",
    "messages_per_section",
    "rate",
)


def _round(tree: Path, n: int, partitions: int) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in tree_paths(tree))}
    script = HERE / "bench" / "fanout_round.py"
    done = subprocess.run(
        [sys.executable, str(script), str(n), str(partitions)],
        env=env,
        capture_output=True,
        text=True,
        timeout=ROUND_BOUND_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"fanout round failed ({tree}): {done.stderr[-2000:]}")
    figures: dict[str, dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def run(quick: bool) -> None:
    """Run the rounds (module docstring) and print each and the medians."""
    rounds = int(os.environ.get("JET_FANOUT_ROUNDS", "2" if quick else "4"))
    n = int(os.environ.get("JET_FANOUT_MESSAGES", "20000"))
    partitions = int(os.environ.get("JET_FANOUT_PARTITIONS", "500"))
    trees = compared_trees()
    print(
        f"keyed produce of {n:,} x 100 B, ack LEADER, to {partitions:,} partitions and to 1; "
        f"{rounds} rounds" + "".join(f"; {tag} = {tree}" for tag, tree in trees.items()),
        flush=True,
    )
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    tags = list(trees)
    for r in range(rounds):
        for tag in tags if r % 2 == 0 else tags[::-1]:
            figures = _round(trees[tag], n, partitions)
            for kind, values in figures.items():
                results.setdefault((tag, kind), []).append(values)
                shown = " ".join(f"{k} {values[k]:.1f}" for k in FIGURES)
                print(f"  round {r} {tag} {kind:<4} {shown}", flush=True)
    print("  medians:")
    for (tag, kind), runs in results.items():
        shown = " ".join(f"{k} {statistics.median(v[k] for v in runs):.1f}" for k in FIGURES)
        print(f"    {tag} {kind:<4} {shown}")
    for tag in tags:
        wide, one = results[(tag, "wide")], results[(tag, "one")]
        cpu_wide = statistics.median(v["client_us"] + v["server_us"] for v in wide)
        cpu_one = statistics.median(v["client_us"] + v["server_us"] for v in one)
        print(
            f"  {tag}: CPU per message, client + server, to 1 / to {partitions:,}: "
            f"{cpu_one / cpu_wide:.2f}x (issue 34's target: >= 0.8x)"
        )
