"""`jet dev` ends every process it started and removes its temporary directory however it
dies: SIGHUP (a closed terminal) like Ctrl-C, and SIGKILL through its watchdog."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from support.cli_child import CliChild

READY_TIMEOUT_S = 60.0
GONE_TIMEOUT_S = 30.0
_ROOT = re.compile(rb"(/[^\0]*?jet-cluster-[^/\0]+)")


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP])
def test_jet_dev_leaves_nothing_behind(sig: signal.Signals) -> None:
    child = CliChild.spawn(["dev", "--servers", "1"])
    kids: list[int] = []
    try:
        child.wait_for("nats: ", "servers: ", timeout_s=READY_TIMEOUT_S)
        kids = _children(child.proc.pid)
        roots = {m.group(1) for k in kids if (m := _ROOT.search(_cmdline(k)))}
        assert len(roots) == 1, (kids, [_cmdline(k) for k in kids])
        root = Path(roots.pop().decode())
        assert root.is_dir()
        workers = [k for k in kids if b"nats-server" in _cmdline(k) or b"server" in _cmdline(k)]
        assert len(workers) >= 2, [_cmdline(k) for k in kids]  # nats-server and one jet server
        os.kill(child.proc.pid, sig)
        child.proc.wait(timeout=GONE_TIMEOUT_S)
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while time.monotonic() < deadline and (any(map(_alive, kids)) or root.exists()):
            time.sleep(0.1)
        left = [(k, _cmdline(k)) for k in kids if _alive(k)]
        assert not left, f"left running after {sig.name}: {left}"
        assert not root.exists(), f"{root} left behind after {sig.name}"
    finally:
        child.stop()
        for k in kids:  # a failed run: end what it left, by PID
            if _alive(k) and b"jet-cluster-" in _cmdline(k):
                os.kill(k, signal.SIGKILL)
