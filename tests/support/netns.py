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

Cuts are blackhole routes inside a host's namespace (iproute2 only, nothing to install): a
host with a blackhole route to a peer can neither open nor keep a TCP connection with it
in either direction (its SYN-ACKs and ACKs are dropped), while every other pair still
talks, so non-transitive partitions (A-B cut, B-C and A-C up) are possible. ``link_down``
takes a host off the LAN entirely.

Every command is bounded (``COMMAND_TIMEOUT_S``) and checked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence

import attrs

COMMAND_TIMEOUT_S = 10.0
HOST_OFFSET = 11
"""Host i (0-based) gets ``.{HOST_OFFSET + i}``."""


class NetLabUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no ``ip``, no permission)."""


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        list(args), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")
    return done


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
        pid = os.getpid() % 100_000
        lab = cls(prefix=f"jt{pid}", hosts=tuple(hosts), subnet=f"10.77.{pid % 200 + 20}")
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
