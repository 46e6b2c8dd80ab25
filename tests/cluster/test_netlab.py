"""The network lab of the partition tests (tests/support/netns.py) against what other labs
left behind: a lab whose process was killed before it could close (a run cut by a
timeout) keeps its root link and address, and a new lab on the same /24 could not reach
its own hosts. Real namespaces and veth links (root only)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from support.netns import SUBNET_BASE, SUBNET_THIRD, NetLab, reap_stale_labs, unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))

CONNECT_TIMEOUT_S = 3.0
LISTENER = """
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
s.listen()
print(s.getsockname()[1], flush=True)
s.settimeout(10)
try:
    s.accept()
except OSError:
    pass
"""


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)


def _links() -> set[str]:
    lines = _ip("-o", "link", "show").stdout.splitlines()
    return {line.split(":", 2)[1].strip().split("@", 1)[0] for line in lines}


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait(timeout=10)
    return done.pid


@contextmanager
def _left_behind(pid: int, third: int) -> Iterator[str]:
    """A lab's root link as a killed process leaves it: up, with the lab's root address."""
    name, peer = f"jt{pid}r0", f"jt{pid}rz"
    assert _ip("link", "add", name, "type", "veth", "peer", "name", peer).returncode == 0
    try:
        _ip("addr", "add", f"{SUBNET_BASE}.{third}.1/24", "dev", name)
        _ip("link", "set", peer, "up")
        _ip("link", "set", name, "up")
        yield name
    finally:
        _ip("link", "del", name)


def _reachable(lab: NetLab, host: str) -> bool:
    cmd = [*lab.exec_prefix(host), sys.executable, "-c", LISTENER, lab.ip(host)]
    listener = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None
        port = int(listener.stdout.readline())
        try:
            socket.create_connection((lab.ip(host), port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError:
            return False
        return True
    finally:
        listener.kill()
        listener.wait(timeout=10)


def test_a_lab_reaches_its_host_past_a_dead_labs_link_on_its_subnet() -> None:
    # The /24 this process's lab starts its search at (the old code's only choice).
    third = SUBNET_THIRD[os.getpid() % len(SUBNET_THIRD)]
    with _left_behind(_dead_pid(), third) as leftover:
        with NetLab.create(["s1"]) as lab:
            assert _reachable(lab, "s1"), f"{lab.ip('s1')} unreachable beside {leftover}"
        assert leftover not in _links(), "the dead process's root link was not deleted"


def test_a_live_processs_lab_is_not_reaped() -> None:
    alive = subprocess.Popen(["sleep", "30"])
    try:
        third = next(k for k in SUBNET_THIRD if k != SUBNET_THIRD[os.getpid() % len(SUBNET_THIRD)])
        with _left_behind(alive.pid, third) as link:
            deleted = reap_stale_labs()
            assert link not in deleted
            assert link in _links()
    finally:
        alive.kill()
        alive.wait(timeout=10)
