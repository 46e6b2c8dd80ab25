"""A metadata Raft group of real processes (node_driver.py), controlled synchronously.

Each :class:`NodeProcess` runs the driver with pipes: requests are JSON lines on stdin,
answers and status events come back on stdout and are read by a thread per process.
Every status event of every process is recorded (for the "one leader per term" check)
and wakes :meth:`ProcCluster.wait_for`. Every wait is bounded; processes are stopped by
``quit`` or killed by PID.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import orjson

from jetserver.raft import RaftConfig

DRIVER = Path(__file__).with_name("node_driver.py")
"""The driver script."""
START_WAIT_S = 15.0
"""Bound on a driver process becoming ready."""
STOP_WAIT_S = 5.0
"""Bound on a clean stop before the process is killed."""
OPTION_FIELDS = (
    "heartbeat_s",
    "election_timeout_min_s",
    "election_timeout_max_s",
    "connection_timeout_s",
    "connection_retry_s",
    "leader_fallback_s",
    "tick_s",
    "fsync",
)
"""RaftConfig fields passed on to the driver."""


class NodeProcess:
    """One driver process (start, request, kill, stop); thread-safe."""

    def __init__(self, config: RaftConfig, cluster: ProcCluster) -> None:
        self.config = config
        self.cluster = cluster
        self.proc: subprocess.Popen[bytes] | None = None
        self.status: dict[str, Any] | None = None
        self.alive = False
        self._ids = itertools.count(1)
        self._answers: dict[int, dict[str, Any]] = {}
        self._write_lock = threading.Lock()
        self._ready = False
        self._log: IO[bytes] | None = None

    @property
    def server_id(self) -> str:
        return self.config.server_id

    def start(self) -> None:
        """Start the process and wait until it is ready (bounded)."""
        config_path = self.config.data_dir.with_suffix(".json")
        config_path.parent.mkdir(parents=True, exist_ok=True)
        config_path.write_bytes(
            orjson.dumps(
                {
                    "server_id": self.config.server_id,
                    "address": self.config.address,
                    "data_dir": str(self.config.data_dir),
                    "peers": [[p.server_id, p.address] for p in self.config.peers],
                    "options": {name: getattr(self.config, name) for name in OPTION_FIELDS},
                }
            )
        )
        self._log = self.config.data_dir.with_suffix(".log").open("ab")
        env = {**os.environ, "JET_RAFT_PASSWORD": self.config.password}
        self._ready = False
        self.status = None
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), str(config_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
        )
        self.alive = True
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        if not self.cluster.wait_for(lambda: self._ready or not self.alive, START_WAIT_S):
            raise AssertionError(f"{self.server_id} did not start in {START_WAIT_S} s")
        if not self.alive:
            raise AssertionError(f"{self.server_id} exited at start (see {self._log.name})")

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            msg = orjson.loads(line)
            with self.cluster.cond:
                if msg.get("event") == "ready":
                    self._ready = True
                elif msg.get("event") == "status":
                    self.status = msg
                    self.cluster.history.append((time.monotonic(), self.server_id, msg))
                elif "id" in msg:
                    self._answers[int(msg["id"])] = msg
                self.cluster.cond.notify_all()
        proc.stdout.close()
        with self.cluster.cond:
            if proc is self.proc:
                self.alive = False
            self.cluster.cond.notify_all()

    def request(self, cmd: dict[str, Any], wait_s: float) -> dict[str, Any] | None:
        """Send a command; its answer, or None if none came within ``wait_s`` (or dead)."""
        proc = self.proc
        if proc is None or not self.alive or proc.stdin is None:
            return None
        rid = next(self._ids)
        try:
            with self._write_lock:
                proc.stdin.write(orjson.dumps({"id": rid, **cmd}) + b"\n")
                proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            return None
        with self.cluster.cond:
            self.cluster.cond.wait_for(lambda: rid in self._answers or not self.alive, wait_s)
            return self._answers.pop(rid, None)

    def kill(self) -> None:
        """SIGKILL the process by PID (its data directory stays)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(STOP_WAIT_S)
        self._closed()

    def stop(self) -> None:
        """Ask the process to quit; kill it if it does not within the bound."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            self._closed()
            return
        try:
            assert proc.stdin is not None
            with self._write_lock:
                proc.stdin.write(b'{"cmd": "quit"}\n')
                proc.stdin.close()
            proc.wait(STOP_WAIT_S)
        except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(STOP_WAIT_S)
        self._closed()

    def _closed(self) -> None:
        with self.cluster.cond:
            self.alive = False
            self.status = None
            self.cluster.cond.notify_all()
        if self.proc is not None and self.proc.stdin is not None:
            with self._write_lock, contextlib.suppress(OSError):
                self.proc.stdin.close()
        if self._log is not None:
            self._log.close()
            self._log = None


class ProcCluster:
    """The processes of one group, sharing one condition for every event."""

    def __init__(self, configs: list[RaftConfig]) -> None:
        self.cond = threading.Condition()
        self.history: list[tuple[float, str, dict[str, Any]]] = []
        self.nodes = [NodeProcess(c, self) for c in configs]

    def __enter__(self) -> ProcCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        for node in self.nodes:
            node.stop()

    def start_all(self) -> None:
        """Start every process (started in parallel, each bounded)."""
        threads = [threading.Thread(target=n.start) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join(START_WAIT_S + 1)
        missing = [n.server_id for n in self.nodes if not n._ready]
        assert not missing, f"not started: {missing}"

    def wait_for(self, predicate: Callable[[], bool], wait_s: float) -> bool:
        """Wait until ``predicate()`` (checked at every event); False on time-out."""
        with self.cond:
            return self.cond.wait_for(predicate, wait_s)

    def leader(self) -> NodeProcess | None:
        """The live node that says it leads and that every other live node follows."""
        live = [n for n in self.nodes if n.alive and n.status is not None]
        leaders = [n for n in live if n.status and n.status["is_leader"]]
        if len(leaders) != 1:
            return None
        leader = leaders[0]
        if all(n.status and n.status["leader_id"] == leader.server_id for n in live):
            return leader
        return None

    def claimed_leader(self) -> NodeProcess | None:
        """A live node that says it leads (the newest term if several)."""
        leaders = [n for n in self.nodes if n.alive and n.status and n.status["is_leader"]]
        return max(leaders, key=lambda n: n.status["term"] if n.status else -1, default=None)

    def leaders_by_term(self) -> dict[int, set[str]]:
        """Every (term -> servers that said they led in it) seen so far."""
        terms: dict[int, set[str]] = {}
        with self.cond:
            for _, server_id, msg in self.history:
                if msg["is_leader"]:
                    terms.setdefault(int(msg["term"]), set()).add(server_id)
        return terms
