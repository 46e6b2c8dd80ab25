"""A seeded, bounded campaign of fault runs on real processes, with a durability report.

    nox -s faults -- --minutes 30            # as many runs as fit, round-robin over classes
    nox -s faults -- --runs 200 --seed 7     # at most 200 runs, seeds 7, 8, ...
    nox -s faults -- --only partition-        # the classes whose name starts with this
    nox -s faults -- --partitions 1000       # with 1,000 idle replicated partitions beside

Each run is one pytest invocation of one fault test (tests/cluster/test_faults_*.py) with
``JET_FAULT_SEED`` set (the random-fault class draws its schedule from it) and
``JET_FAULT_REPORT`` naming a file where the test's final check writes what it counted
(cluster/scenario.py ``write_report``). A failed run prints its class, seed and the end of
its output; the campaign goes on. At the end it prints one row per fault class: runs,
failed runs, faults injected, records acked, lost, duplicated, and the longest time
without an ack. The exit status is 1 if any run failed or lost or duplicated anything.

With ``--partitions N`` every scenario-based run first creates N idle replicated
partitions beside its stream (``JET_FAULT_BALLAST_PARTITIONS``, tests/cluster/scenario.py)
and checks at the end that each with a live ISR member leads again on a live server; the
faults then also move hundreds of leaderships at once. ``fsync-rf1`` (one server, no
scenario) runs without them.

Network-partition classes need root (network namespaces); where they skip, their runs
are counted as skipped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
CLASSES: list[tuple[str, str]] = [
    ("fsync-rf1", "tests/server/test_fsync_failure.py"),
    (
        "fsync-leader",
        "tests/cluster/test_faults_fsync.py::"
        "test_failed_fsync_on_a_replica_loses_no_acked_record[leader]",
    ),
    (
        "fsync-follower",
        "tests/cluster/test_faults_fsync.py::"
        "test_failed_fsync_on_a_replica_loses_no_acked_record[follower]",
    ),
    (
        "fsync-raft-journal",
        "tests/cluster/test_faults_fsync.py::"
        "test_failed_fsync_of_the_raft_journal_stops_the_server",
    ),
    (
        "partition-leader-isolated",
        "tests/cluster/test_faults_partition.py::test_partition[leader-isolated]",
    ),
    (
        "partition-leader-without-nats",
        "tests/cluster/test_faults_partition.py::test_partition[leader-without-nats]",
    ),
    (
        "partition-non-transitive",
        "tests/cluster/test_faults_partition.py::test_partition[non-transitive]",
    ),
    (
        "partition-one-way-from-leader",
        "tests/cluster/test_faults_partition.py::test_partition[one-way-from-leader]",
    ),
    (
        "partition-one-way-to-leader",
        "tests/cluster/test_faults_partition.py::test_partition[one-way-to-leader]",
    ),
    ("partition-flapping", "tests/cluster/test_faults_partition.py::test_flapping_link"),
    ("two-sigterms-then-kill9", "tests/cluster/test_faults_two_stops.py"),
    ("power-loss", "tests/cluster/test_faults_power_loss.py"),
    ("leader-kill", "tests/cluster/test_faults_leader.py"),
    ("follower-kill", "tests/cluster/test_faults_follower.py"),
    ("bit-rot-unclean", "tests/cluster/test_faults_corruption.py"),
    ("bit-rot-clean-restart", "tests/cluster/test_faults_bitrot.py"),
    ("random-kills-pauses-nats", "tests/cluster/test_faults_random.py"),
    ("wall-clock-jump", "tests/server/test_clock_jump.py"),
]
RUN_TIMEOUT_S = 600.0
RANDOM_FAULTS = 6
"""Faults of each run of the random-fault class (JET_FAULT_COUNT): one of each of its 5
kinds and one drawn by weight (the suite's own run injects the 5)."""
BALLAST_TEST_TIMEOUT_S = 420
"""pytest-timeout of a run beside ``--partitions`` (the suite's 120 s cut a bit-rot run
beside 1,000 partitions at load 15 after it had created them and restarted a server)."""
FAILED_OUTPUT_DIR = Path(tempfile.gettempdir()) / "jet-fault-campaign"
"""Where the whole output of each failed run is kept (``NAME-SEED.log``), with the log
files its processes wrote (``NAME-SEED/``: every server's ``server.log``, nats-server's)."""
KEPT_LOGS = "*.log"
"""The files of a failed run's pytest temporary directory that are kept (its data
directories are not: segments and journals are large and the logs name what happened)."""


@dataclass
class Row:
    runs: int = 0
    failed: int = 0
    skipped: int = 0
    faults: int = 0
    acked: int = 0
    lost: int = 0
    duplicated: int = 0
    longest_s: float = 0.0
    failures: list[str] = field(default_factory=list)


def run_one(name: str, node: str, seed: int, row: Row, work: Path, partitions: int = 0) -> None:
    report = work / f"{name}-{seed}.jsonl"
    env = {
        **os.environ,
        "JET_FAULT_SEED": str(seed),
        "JET_FAULT_COUNT": str(RANDOM_FAULTS),
        "JET_FAULT_REPORT": str(report),
        "JET_FAULT_BALLAST_PARTITIONS": str(partitions),
    }
    # Its own temporary directory, so that a failed run's server logs can be kept (pytest
    # keeps only the last few base directories, and a cluster that never became ready has
    # printed nothing of them).
    basetemp = work / f"{name}-{seed}-tmp"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"]
    cmd += ["--basetemp", str(basetemp), node]
    if partitions:
        cmd[-1:-1] = ["-o", f"timeout={BALLAST_TEST_TIMEOUT_S}"]
    started = time.monotonic()
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
        )
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = f"timed out after {RUN_TIMEOUT_S} s: {exc}", -1
    took = time.monotonic() - started
    lines = [orjson.loads(x) for x in report.read_bytes().splitlines()] if report.exists() else []
    last = output.strip().splitlines()[-1] if output.strip() else ""
    logs = keep_logs(basetemp, FAILED_OUTPUT_DIR / f"{name}-{seed}") if code != 0 else 0
    shutil.rmtree(basetemp, ignore_errors=True)
    if code == 0 and "skipped" in last and "passed" not in last:
        row.skipped += 1
        print(f"  {name} seed {seed}: skipped ({last})", flush=True)
        return
    row.runs += 1
    for line in lines:
        row.faults += int(line.get("faults", 1))
        row.acked += int(line.get("acked", 0))
        row.lost += int(line.get("lost", 0))
        row.duplicated += int(line.get("duplicated", 0))
        row.longest_s = max(row.longest_s, float(line.get("longest_without_ack_s", 0.0)))
    if not lines:
        row.faults += 1
    if code != 0:
        row.failed += 1
        row.failures.append(f"seed {seed}")
        tail = "\n".join(output.strip().splitlines()[-40:])
        kept = FAILED_OUTPUT_DIR / f"{name}-{seed}.log"
        FAILED_OUTPUT_DIR.mkdir(parents=True, exist_ok=True)
        kept.write_text(output)
        print(
            f"  {name} seed {seed}: FAILED in {took:.0f} s (rerun: JET_FAULT_SEED={seed} "
            f"pytest '{node}'; whole output in {kept}, {logs} process logs in "
            f"{kept.with_suffix('')})\n{tail}",
            flush=True,
        )
    else:
        print(f"  {name} seed {seed}: ok in {took:.0f} s ({last})", flush=True)


def keep_logs(basetemp: Path, dest: Path) -> int:
    """Copy the log files under ``basetemp`` (:data:`KEPT_LOGS`) to ``dest``, keeping their
    paths below it; return how many."""
    kept = 0
    for log in sorted(basetemp.rglob(KEPT_LOGS)) if basetemp.is_dir() else []:
        if not log.is_file():
            continue
        target = dest / log.relative_to(basetemp)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, target)
        kept += 1
    return kept


def print_table(rows: dict[str, Row]) -> None:
    head = (
        f"{'fault class':<30} {'runs':>5} {'failed':>6} {'faults':>7} {'acked':>9} "
        f"{'lost':>5} {'dup':>5} {'max no-ack s':>12}"
    )
    print("\ndurability report")
    print(head)
    print("-" * len(head))
    total = Row()
    for name, r in rows.items():
        print(
            f"{name:<30} {r.runs:>5} {r.failed:>6} {r.faults:>7} {r.acked:>9} {r.lost:>5} "
            f"{r.duplicated:>5} {r.longest_s:>12.1f}"
            + (f"  (skipped {r.skipped})" if r.skipped else "")
        )
        total.runs += r.runs
        total.failed += r.failed
        total.faults += r.faults
        total.acked += r.acked
        total.lost += r.lost
        total.duplicated += r.duplicated
        total.longest_s = max(total.longest_s, r.longest_s)
    print("-" * len(head))
    print(
        f"{'all':<30} {total.runs:>5} {total.failed:>6} {total.faults:>7} {total.acked:>9} "
        f"{total.lost:>5} {total.duplicated:>5} {total.longest_s:>12.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="time bound (default 10)")
    parser.add_argument("--runs", type=int, default=1000, help="most runs (default 1000)")
    parser.add_argument(
        "--seed",
        type=int,
        default=int(time.time()) % 100_000,
        help="first seed (default: from the clock, printed)",
    )
    parser.add_argument("--only", default="", help="only the classes starting with this")
    parser.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="idle replicated partitions created beside each run's stream (default 0)",
    )
    args = parser.parse_args(argv)
    classes = [(n, node) for n, node in CLASSES if n.startswith(args.only)]
    if not classes:
        parser.error(f"no fault class starts with {args.only!r}")
    print(
        f"fault campaign: seed {args.seed}, at most {args.runs} runs, {args.minutes} min, "
        f"{len(classes)} classes"
        + (f", {args.partitions} idle replicated partitions beside" if args.partitions else ""),
        flush=True,
    )
    rows = {n: Row() for n, _ in classes}
    deadline = time.monotonic() + args.minutes * 60
    with tempfile.TemporaryDirectory(prefix="jet-faults-") as tmp:
        for i in range(args.runs):
            if time.monotonic() >= deadline:
                break
            name, node = classes[i % len(classes)]
            run_one(name, node, args.seed + i, rows[name], Path(tmp), args.partitions)
    print_table(rows)
    bad = any(r.failed or r.lost or r.duplicated for r in rows.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
