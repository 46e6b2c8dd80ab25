"""CPU seconds of a Spark session's JVM and of the Python processes it started, from /proc
(:mod:`bench.bench_spark` and :mod:`bench.bench_spark_floor`): what survives the shared
machine's load better than wall time."""

from __future__ import annotations

import os
from typing import Any

import attrs

from bench.bench_sdk import _process_cpu_s

__all__ = ["Cpu", "cpu_now", "cpu_since"]


def _jvm_cpu(spark: Any) -> float:
    """CPU seconds (user + system) the session's JVM has used, from /proc; threads that
    ended (a query's stream execution thread) included."""
    return _process_cpu_s(spark.sparkContext._gateway.proc.pid)


def _stat_cpu_s(pid: int, *, reaped: bool) -> float:
    """User + system CPU seconds of ``pid`` from /proc (0.0 if it is gone), with its reaped
    children's if ``reaped``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


_WORKERS = ["pyspark.daemon", "pyspark.worker"]
"""The end of the command line of Spark's Python worker daemon (and of the workers it
forks); the planners' daemons end with another module (``pyspark.sql.worker.*``)."""


def _python_cpu(spark: Any) -> tuple[float, float]:
    """CPU seconds of the Python processes the session's JVM started, ended ones included
    (a process that ends with its parent, reaped outside the JVM's tree, is lost: a span
    may then show ``others`` below zero),
    split in two: ``(workers, others)``. ``workers`` are the worker daemon
    (``pyspark.daemon pyspark.worker``) and the workers it forked (the tasks' reads and
    writes: the per-row work); ``others`` are the rest (the streaming source's runner,
    which each query starts and which ends with it; the planners' daemons and their forks):
    the JVM's reaped children plus every other live descendant. From /proc: (0.0, 0.0)
    where it is not Linux."""
    jvm = spark.sparkContext._gateway.proc.pid
    others = _stat_cpu_s(jvm, reaped=True) - _stat_cpu_s(jvm, reaped=False)
    workers = 0.0
    stack = _children(jvm)
    while stack:
        pid = stack.pop()
        spent = _stat_cpu_s(pid, reaped=True)
        if _cmdline(pid)[-3:-1] == _WORKERS:
            workers += spent
        else:
            others += spent
        stack += _children(pid)
    return workers, others


@attrs.frozen
class Cpu:
    """CPU seconds of the session's JVM and of its Python processes over a span."""

    jvm: float
    workers: float
    """Spark's Python workers (the daemon and its forks): the tasks' reads and writes."""
    others: float
    """Spark's other Python processes (per query or plan: the source runner, planners)."""


def cpu_now(spark: Any) -> Cpu:
    return Cpu(_jvm_cpu(spark), *_python_cpu(spark))


def cpu_since(spark: Any, start: Cpu) -> Cpu:
    now = cpu_now(spark)
    return Cpu(now.jvm - start.jvm, now.workers - start.workers, now.others - start.others)
