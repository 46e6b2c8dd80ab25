"""`jet server` whose NATS URL never answers: it names the URL, retries with backoff, and
exits 1 after ``nats.startup_wait_s`` (0 = wait forever), as a real process."""

from __future__ import annotations

import contextlib
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import anyio
import pytest

from jetserver.config.server import NatsConfig
from jetserver.natslink.link import NatsLink
from support.nats_server import NatsServer

JET = [sys.executable, "-m", "jetserver.cli.main"]
REFUSED = "nats://127.0.0.1:1"  # nothing listens on port 1 of the loopback
START_BOUND_S = 60.0
"""Bound on the server process starting up to its first NATS attempt."""
SLACK_S = 5.0
"""Scheduling slack allowed past a start-up bound on a loaded machine."""


def _run_server(
    tmp_path: Path, url: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run(
        [*JET, "server", "--nats", url, "--port", "0", "--data-dir", str(tmp_path), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result, time.monotonic() - started


def _log_span(log: str, first: str, last: str) -> float:
    """Seconds between the log lines holding ``first`` and ``last`` (text format)."""

    def at(needle: str) -> datetime:
        (line,) = [line for line in log.splitlines() if needle in line]
        return datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00"))

    return (at(last) - at(first)).total_seconds()


def test_refused_url_is_named_and_the_server_gives_up(tmp_path: Path) -> None:
    result, elapsed = _run_server(tmp_path, REFUSED, "--nats-startup-wait", "3")
    assert result.returncode == 1, result.stderr
    assert 3.0 <= elapsed < 60.0
    assert 3.0 <= _log_span(result.stderr, "open-file limit", "server failed") < 3.0 + SLACK_S
    lines = result.stderr.splitlines()
    warnings = [line for line in lines if " WARNING " in line]
    # Backed-off retries that each name the URL, not four anonymous warnings a second.
    assert 1 <= len(warnings) <= 8, warnings
    assert all(REFUSED in line for line in warnings), warnings
    assert "nats error" not in result.stderr
    (failed,) = [line for line in lines if "server failed" in line]
    assert REFUSED in failed
    assert "did not answer within 3 s" in failed
    assert "nats.startup_wait_s (--nats-startup-wait) waits longer, 0 forever" in failed


def test_silent_url_is_bounded_too(tmp_path: Path) -> None:
    # A port that accepts but never sends INFO: one attempt alone would wait
    # nats.connect_timeout_s (5 s); the startup bound cuts it.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"nats://127.0.0.1:{silent.getsockname()[1]}"
        result, _ = _run_server(tmp_path, url, "--nats-startup-wait", "2")
    assert result.returncode == 1, result.stderr
    # From the last line before connecting to the error (the process's start-up is not
    # counted: it takes seconds on a loaded machine).
    assert 2.0 <= _log_span(result.stderr, "open-file limit", "server failed") < 2.0 + SLACK_S
    assert url in result.stderr
    assert "did not answer within 2 s" in result.stderr


def test_wait_zero_waits_until_stopped(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            *JET,
            "server",
            "--nats",
            REFUSED,
            "--nats-startup-wait",
            "0",
            "--data-dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        # Signal only once the server says it waits (start-up takes seconds on a loaded
        # machine, and a SIGTERM before the handler is installed would just kill it).
        deadline = time.monotonic() + START_BOUND_S
        while not any("waiting for nats without a bound" in x for x in seen):
            seen.append(lines.get(timeout=max(0.01, deadline - time.monotonic())))
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)  # longer than the waits the tests above give up after
        assert proc.poll() is None, "exited though told to wait for NATS forever"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        reader.join(timeout=10)
        while not lines.empty():
            seen.append(lines.get_nowait())
        err = "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, err
    assert "stopped before NATS was reachable" in err
    assert "waiting for nats without a bound" in err


@pytest.mark.anyio
async def test_a_dead_url_beside_a_live_one_is_skipped_within_one_attempt(
    nats_server: NatsServer,
) -> None:
    # nats-py tries the URLs in a random order: each attempt must try them all before it
    # counts as failed (one attempt allowed here; 6 tries, each order likely seen).
    for _ in range(6):
        link = NatsLink(NatsConfig(servers=(REFUSED, nats_server.url)))
        try:
            with anyio.fail_after(10):
                await link.connect(attempts=1)
            assert link.connected
        finally:
            await link.close()
