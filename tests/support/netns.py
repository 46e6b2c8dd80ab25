"""A small network of Linux network namespaces for partition tests (needs root).

    with NetLab.create(["s1", "s2", "s3"]) as lab:
        lab.ip("s1")            # "10.77.K.11": s1's address inside its namespace
        lab.root_ip             # "10.77.K.1": this (the test's) namespace on the same LAN
        lab.exec_prefix("s1")   # ["ip", "netns", "exec", "<ns>"]: run a command in it
        lab.isolate("s1", ["s2", "s3"])   # s1 cannot exchange packets with s2 and s3
        lab.heal("s1")          # every route of s1 back
        lab.link_down("s2"); lab.link_up("s2")   # s2's cable pulled / plugged back

Layout: one namespace holds a bridge; every host gets its own namespace with a veth pair
whose other end is on the bridge; the test's own namespace gets one veth on the bridge too
(so the test talks to the hosts directly, and a nats-server it starts can listen on
``root_ip``). The addresses are a /24 that exists only on these links. Every name carries
a prefix made of this process's PID, and :meth:`NetLab.close` deletes everything made
(namespaces, and the test namespace's veth), also after a failure.

A lab's /24 is one no other link of the test namespace holds: labs of concurrent test
processes, and the leftovers of a process killed before it could close its lab (a run
cut by a timeout), would otherwise route the same addresses two ways, and the test could
not reach its own servers. Creation is serialised by a lock file (``LOCK_PATH``); it first
deletes the root links of labs whose process is gone, and their namespaces where nothing
runs in them any more.

Cuts are blackhole routes inside a host's namespace (iproute2 only, nothing to install): a
host with a blackhole route to a peer can neither open nor keep a TCP connection with it
in either direction (its SYN-ACKs and ACKs are dropped), while every other pair still
talks, so non-transitive partitions (A-B cut, B-C and A-C up) are possible. ``link_down``
takes a host off the LAN entirely.

Every command is bounded (``COMMAND_TIMEOUT_S``) and checked.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import attrs

COMMAND_TIMEOUT_S = 10.0
HOST_OFFSET = 11
"""Host i (0-based) gets ``.{HOST_OFFSET + i}``."""
SUBNET_BASE = "10.77"
"""Labs use ``SUBNET_BASE.K.0/24``, K in ``SUBNET_THIRD``."""
SUBNET_THIRD = range(20, 220)
LOCK_PATH = "/run/lock/jet-netlab.lock"
"""Held while a lab picks its subnet and builds, so two labs never pick the same one."""
_LAB_NAME = re.compile(r"^jt(\d+)(\S*)$")


class NetLabUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no ``ip``, no permission)."""


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        list(args), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")
    return done


@contextmanager
def _creation_lock() -> Iterator[None]:
    os.makedirs(os.path.dirname(LOCK_PATH), exist_ok=True)
    with open(LOCK_PATH, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def _thirds_in_use() -> set[int]:
    """The K of every ``SUBNET_BASE.K.x`` address on a link of this namespace."""
    listed = _run("ip", "-o", "-4", "addr", "show").stdout
    found = re.findall(rf"inet {re.escape(SUBNET_BASE)}\.(\d+)\.\d+/", listed)
    return {int(k) for k in found}


def _free_third(in_use: set[int], *, start: int) -> int:
    """The first K of ``SUBNET_THIRD`` not in ``in_use``, from a start spread by ``start``."""
    n = len(SUBNET_THIRD)
    for step in range(n):
        third = SUBNET_THIRD[(start + step) % n]
        if third not in in_use:
            return third
    raise RuntimeError(f"every {SUBNET_BASE}.K/24 of a network lab is in use")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale_labs() -> list[str]:
    """Delete what labs of dead processes left: their root links (whose addresses would
    shadow a new lab's routes) and their namespaces that no process runs in any more.
    Nothing is killed; returns the names deleted."""
    deleted: list[str] = []
    for line in _run("ip", "-o", "link", "show").stdout.splitlines():
        name = line.split(":", 2)[1].strip().split("@", 1)[0] if ":" in line else ""
        owner = _LAB_NAME.match(name)
        stale = owner is not None and owner.group(2) == "r0" and not _alive(int(owner.group(1)))
        if stale and _run("ip", "link", "del", name, check=False).returncode == 0:
            deleted.append(name)
    for line in _run("ip", "netns", "list").stdout.splitlines():
        name = line.split(" ", 1)[0]
        owner = _LAB_NAME.match(name)
        if owner is None or _alive(int(owner.group(1))):
            continue
        if _run("ip", "netns", "pids", name, check=False).stdout.strip():
            continue
        if _run("ip", "netns", "del", name, check=False).returncode == 0:
            deleted.append(name)
    return deleted


def unavailable_reason() -> str | None:
    """Why a NetLab cannot be made here, or None if it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    probe = f"jtprobe{os.getpid()}"
    done = _run("ip", "netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"cannot create a network namespace: {done.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return None


@attrs.define(eq=False)
class NetLab:
    """Hosts in their own namespaces on one bridged LAN; see the module docs."""

    prefix: str
    """Prefix of every namespace and link name."""
    hosts: tuple[str, ...]
    """Host names (e.g. server ids)."""
    subnet: str
    """``10.77.K``: the first three octets of the LAN."""
    cut: dict[str, set[str]] = attrs.field(factory=dict)
    """Per host, the peers it has a blackhole route to."""
    _made_ns: list[str] = attrs.field(factory=list)
    _made_root_link: str | None = None

    @classmethod
    def create(cls, hosts: Sequence[str]) -> NetLab:
        """Make the bridge, the hosts' namespaces and links, and this namespace's link.

        Raises:
            NetLabUnavailable: not possible here (see :func:`unavailable_reason`).
        """
        reason = unavailable_reason()
        if reason is not None:
            raise NetLabUnavailable(reason)
        pid = os.getpid()
        with _creation_lock():
            reap_stale_labs()
            third = _free_third(_thirds_in_use(), start=pid)
            lab = cls(prefix=f"jt{pid}", hosts=tuple(hosts), subnet=f"{SUBNET_BASE}.{third}")
            try:
                lab._build()
            except BaseException:
                lab.close()
                raise
        return lab

    # ------------------------------------------------------------------ names

    @property
    def bridge_ns(self) -> str:
        """The namespace holding the bridge."""
        return f"{self.prefix}br"

    def ns(self, host: str) -> str:
        """The namespace of ``host``."""
        return f"{self.prefix}{host}"

    def ip(self, host: str) -> str:
        """The address of ``host``."""
        return f"{self.subnet}.{HOST_OFFSET + self.hosts.index(host)}"

    @property
    def root_ip(self) -> str:
        """The address of the test's own namespace on the LAN."""
        return f"{self.subnet}.1"

    def exec_prefix(self, host: str) -> list[str]:
        """Prefix a command with this to run it in ``host``'s namespace."""
        return ["ip", "netns", "exec", self.ns(host)]

    def _bridge_end(self, host: str) -> str:
        return f"{self.prefix}{host}b"

    # ------------------------------------------------------------------ build

    def _build(self) -> None:
        br = self.bridge_ns
        _run("ip", "netns", "add", br)
        self._made_ns.append(br)
        _run("ip", "-n", br, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", br, "link", "set", "br0", "up")
        for host in self.hosts:
            ns = self.ns(host)
            _run("ip", "netns", "add", ns)
            self._made_ns.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            end = self._bridge_end(host)
            _run("ip", "link", "add", end, "netns", br, "type", "veth", "peer", "eth0", "netns", ns)
            _run("ip", "-n", br, "link", "set", end, "master", "br0", "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.ip(host)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
        root = f"{self.prefix}r0"
        _run("ip", "link", "add", root, "type", "veth", "peer", f"{self.prefix}rb", "netns", br)
        self._made_root_link = root
        _run("ip", "-n", br, "link", "set", f"{self.prefix}rb", "master", "br0", "up")
        _run("ip", "addr", "add", f"{self.root_ip}/24", "dev", root)
        _run("ip", "link", "set", root, "up")

    # ------------------------------------------------------------------ faults

    def isolate(self, host: str, peers: Iterable[str]) -> None:
        """``host`` can no longer exchange packets with ``peers`` (hosts, or ``"root"``
        for the test's namespace, e.g. where nats-server listens)."""
        done = self.cut.setdefault(host, set())
        for peer in peers:
            if peer in done:
                continue
            address = self.root_ip if peer == "root" else self.ip(peer)
            _run("ip", "-n", self.ns(host), "route", "add", "blackhole", f"{address}/32")
            done.add(peer)

    def heal(self, host: str | None = None) -> None:
        """Remove the blackhole routes of ``host`` (default: of every host)."""
        for h in [host] if host is not None else list(self.cut):
            for peer in sorted(self.cut.pop(h, set())):
                address = self.root_ip if peer == "root" else self.ip(peer)
                _run("ip", "-n", self.ns(h), "route", "del", "blackhole", f"{address}/32")

    def link_down(self, host: str) -> None:
        """Take ``host`` off the LAN (its bridge port goes down)."""
        _run("ip", "-n", self.bridge_ns, "link", "set", self._bridge_end(host), "down")

    def link_up(self, host: str) -> None:
        """Put ``host`` back on the LAN."""
        _run("ip", "-n", self.bridge_ns, "link", "set", self._bridge_end(host), "up")

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """Delete everything made (idempotent; never raises)."""
        if self._made_root_link is not None:
            _run("ip", "link", "del", self._made_root_link, check=False)
            self._made_root_link = None
        for ns in reversed(self._made_ns):
            _run("ip", "netns", "del", ns, check=False)
        self._made_ns.clear()

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
