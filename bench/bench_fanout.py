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

Each round then runs the fixed-batch variant (``wide_fixed`` / ``one_fixed``, see
``bench/fanout_round.py``): bursts of ``JET_FANOUT_SECTION`` (default 13, the closed
loop's section size at 500 partitions; 0: skipped) x partitions messages, each burst
flushed as one request, to both streams: the same messages per request wide and narrow,
so the wide side's extra CPU is its sections' alone, the client's and the server's apart,
whatever the server's speed does to the closed loop's batches.
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


def _round(tree: Path, n: int, partitions: int, section: int) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in tree_paths(tree))}
    script = HERE / "bench" / "fanout_round.py"
    done = subprocess.run(
        [sys.executable, str(script), str(n), str(partitions), str(section)],
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
    section = int(os.environ.get("JET_FANOUT_SECTION", "13"))
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
            figures = _round(trees[tag], n, partitions, section)
            for kind, values in figures.items():
                results.setdefault((tag, kind), []).append(values)
                shown = " ".join(f"{k} {values[k]:.1f}" for k in FIGURES)
                print(f"  round {r} {tag} {kind:<4} {shown}", flush=True)
    print("  medians:")
    for (tag, kind), runs in results.items():
        shown = " ".join(f"{k} {statistics.median(v[k] for v in runs):.1f}" for k in FIGURES)
        print(f"    {tag} {kind:<4} {shown}")
    for tag in tags:
        _ratio(tag, "", results, partitions)
        if section > 0:
            _ratio(tag, "_fixed", results, partitions)


def _ratio(
    tag: str, variant: str, results: dict[tuple[str, str], list[dict[str, float]]], partitions: int
) -> None:
    """Print one tree's CPU ratio (to 1 / to many) of a variant, and the wide side's extra
    CPU per message, client and server apart."""
    wide, one = results[(tag, "wide" + variant)], results[(tag, "one" + variant)]

    def median(runs: list[dict[str, float]], *keys: str) -> float:
        return statistics.median(sum(v[k] for k in keys) for v in runs)

    cpu_wide, cpu_one = (
        median(wide, "client_us", "server_us"),
        median(one, "client_us", "server_us"),
    )
    extra = {k: median(wide, k) - median(one, k) for k in ("client_us", "server_us")}
    print(
        f"  {tag}{variant or ' (closed loop)'}: CPU per message, client + server, to 1 / to "
        f"{partitions:,}: {cpu_one / cpu_wide:.2f}x (issue 34's target: >= 0.8x); wide minus "
        f"one: client {extra['client_us']:+.1f} us, server {extra['server_us']:+.1f} us"
    )
