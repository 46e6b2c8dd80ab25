"""Ctrl-C interrupts any blocking sync call within 0.5 s and leaves the client closable.

A child process (tests/sdk/sigint_child.py) blocks in one sync call against a real server
and gets a real SIGINT: iteration and ``fetch`` on a stream where nothing arrives, ``send``
and ``flush`` while the server is stopped (SIGSTOP, so nothing is acknowledged). It reports
how long after the signal the call raised KeyboardInterrupt and how long closing took.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from jetsdk import sync
from support.jet_server import start_server_process
from support.nats_server import NatsServer

CHILD = Path(__file__).with_name("sigint_child.py")
INTERRUPT_WITHIN_S = 0.5
CLOSE_WITHIN_S = 10.0


@pytest.mark.parametrize("call", ["iterate", "fetch", "send", "flush"])
def test_ctrl_c_interrupts_a_blocking_sync_call(
    nats_server: NatsServer, tmp_path: Path, call: str
) -> None:
    server = start_server_process(nats_server.url, tmp_path / "data")
    stream = f"int-{uuid.uuid4().hex[:8]}"
    try:
        with sync.Client([server.address]) as client:
            client.create_stream(stream, stream)
        child = subprocess.Popen(
            [sys.executable, str(CHILD), server.address, stream, call],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            assert child.stdin is not None
            assert child.stdout.readline().strip() == "blocking"
            if call in ("send", "flush"):
                server.proc.send_signal(signal.SIGSTOP)  # nothing gets acknowledged
                child.stdin.write("go\n")  # only now: the message cannot be acked first
                child.stdin.flush()
            # The child says when its main thread waits inside the call.
            assert child.stdout.readline().strip() == "blocked"
            assert child.poll() is None, "the call returned without blocking"
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=CLOSE_WITHIN_S + 20)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            server.proc.send_signal(signal.SIGCONT)
        lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
        assert child.returncode == 0, out + err
        assert float(lines["interrupted"]) < INTERRUPT_WITHIN_S
        assert float(lines["closed"]) < CLOSE_WITHIN_S
    finally:
        server.stop()
