"""A jet cluster of real processes: one nats-server plus N ``jet server``\\ s on 127.0.0.1.

    with Cluster(size=3) as cluster:          # starts everything, bounded; temp dir
        cluster.addresses                     # ["127.0.0.1:PORT", ...] for Client(...)
        cluster.kill("s2")                    # SIGKILL by PID; its data stays
        cluster.server("s1").pause()          # SIGSTOP / .resume(): SIGCONT
        cluster.start_server("s2")            # again: same id, ports and data
        cluster.nats.restart()                # a NATS outage, same port

Every server gets its own TOML config (fixed client and Raft ports chosen when the cluster
is planned, so a restarted server keeps its addresses), its own log file, and with
``power_loss=True`` a durability trace (:meth:`simulate_power_loss` then cuts every file back
to its last fsync). With ``size > 1`` the servers form a cluster (spec/cluster.md): each
knows the others as Raft peers and shares a cluster password. :meth:`start` returns once
every server is ready and (``wait_registered``) lists every other server in its metadata.
Every wait is bounded; every process is stopped by PID (SIGCONT first if paused, SIGTERM,
SIGKILL after a bound).

Thread safety: one owner; the blocking calls may run in a worker thread
(``anyio.to_thread.run_sync``) while async code uses the cluster's addresses.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol, Self

import attrs

from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import Api, FrameDecoder, encode_frame
from jetsdk.codec.messages import decode_json, encode_json
from jetserver.storage.durability_trace import PowerLossReport
from jetserver.testing.jet_process import (
    READY_TIMEOUT_S,
    STOP_TIMEOUT_S,
    JetServer,
    free_ports,
    server_config,
)
from jetserver.testing.nats import NatsServer
from jetserver.testing.waiting import WaitTimeout, wait_until

__all__ = ["DEFAULT_PASSWORD", "Cluster", "NetworkLab", "metadata_request", "use_settings"]

DEFAULT_PASSWORD = "jet-testing-password-0123456789"
"""The cluster secret of test clusters (>= 16 characters)."""

Settings = Mapping[str, Mapping[str, Any]]
"""Extra config: section -> key -> value (merged into every server's TOML)."""
_SUITE_SETTINGS: dict[str, dict[str, Any]] = {}
"""Settings under every cluster's own (:func:`use_settings`)."""


def use_settings(settings: Settings) -> None:
    """Merge ``settings`` into the TOML of every server of every :class:`Cluster` planned
    from now on in this process, under the cluster's own :attr:`Cluster.settings` (which
    win key by key). For a test suite's timer settings (tests/conftest.py: a Raft tick of
    its own); an empty mapping clears them."""
    _SUITE_SETTINGS.clear()
    for section, values in settings.items():
        _SUITE_SETTINGS[section] = dict(values)


def merged_settings(own: Settings) -> dict[str, dict[str, Any]]:
    """The settings of :func:`use_settings` with ``own`` over them, key by key."""
    out = {section: dict(values) for section, values in _SUITE_SETTINGS.items()}
    for section, values in own.items():
        out.setdefault(section, {}).update(values)
    return out


class NetworkLab(Protocol):
    """Hosts in network namespaces (fault tests of network partitions): each process of a
    cluster then runs in its own namespace (host = server id, ``nats`` for nats-server)."""

    def ip(self, host: str) -> str:
        """The address of ``host``."""
        ...

    def exec_prefix(self, host: str) -> Sequence[str]:
        """The command prefix that runs a program in ``host``'s namespace."""
        ...


def metadata_request(address: str, timeout_s: float) -> dict[str, Any]:
    """One blocking Metadata request (spec/protocol.md) to the server at ``address``.

    Raises:
        OSError, CodecError, ValueError: no answer, a bad one, or a refusal.
    """
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(encode_frame(Api.METADATA, 1, encode_json({"streams": []})))
        decoder = FrameDecoder()
        while True:
            frame = decoder.next_frame()
            if frame is not None:
                if frame.is_error:
                    raise ValueError(f"Metadata refused by {address}")
                return decode_json(frame.body)
            data = sock.recv(65536)
            if not data:
                raise ValueError(f"{address} closed the connection")
            decoder.feed(data)


@attrs.define(eq=False)
class Cluster:
    """nats-server + ``size`` jet servers on 127.0.0.1, clustered when ``size > 1``.

    A context manager: entering starts everything (bounded waits), leaving stops every
    process by PID and removes the temporary directory::

        with Cluster(size=3) as cluster:
            cluster.addresses            # ["127.0.0.1:PORT", ...] for Client(...)
            cluster.kill("s2")           # SIGKILL by PID; its data stays
            cluster.start_server("s2")   # again: same id, ports and data
    """

    size: int = 3
    """Number of jet servers."""
    root: Path | None = None
    """Where every process keeps its files (None: a temporary directory, removed at
    :meth:`stop`)."""
    power_loss: bool = False
    """Start the servers with a durability trace (for :meth:`simulate_power_loss`)."""
    settings: Settings = attrs.field(factory=dict)
    """Extra config sections merged into every server's TOML."""
    log_level: str = "INFO"
    """Server log level."""
    server_args: tuple[str, ...] = ()
    """Extra ``jet server`` flags for every server."""
    server_env: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    """Extra environment per server id (``s1``...), for every start of that server."""
    server_prefix: tuple[str, ...] = ()
    """Command prefix of every server process, e.g. ``valgrind --tool=callgrind``
    (``python -m bench cost``'s ``instructions``); after the network lab's."""
    password: str = attrs.field(default=DEFAULT_PASSWORD, repr=False)
    """The cluster password (with ``size > 1``)."""
    ports: Mapping[str, tuple[int, int]] | None = None
    """Client and Raft port per server id (None: free ports chosen at start)."""
    log_file: IO[bytes] | None = None
    """Where every server's output goes (None: a ``server.log`` per server)."""
    new_session: bool = False
    """Start children in their own sessions (a terminal's Ctrl-C then reaches only the
    owner, who stops them in order: servers first, NATS last)."""
    wait_registered: bool = True
    """With ``size > 1``, :meth:`start` also waits until every server lists every server
    (not with TLS or authentication in :attr:`settings`: the plain probe is refused)."""
    netlab: NetworkLab | None = None
    """Run every process in its own network namespace of this lab (see NetworkLab)."""
    nats: NatsServer | None = None
    """The nats-server (after :meth:`start`)."""
    servers: list[JetServer] = attrs.field(factory=list)
    """The jet servers (after :meth:`start`)."""
    _own_root: bool = False

    @property
    def clustered(self) -> bool:
        """True if the servers form a cluster (more than one)."""
        return self.size > 1

    @property
    def nats_url(self) -> str:
        """``nats://127.0.0.1:PORT``."""
        if self.nats is None:
            raise WaitTimeout("cluster not started")
        return self.nats.url

    @property
    def addresses(self) -> list[str]:
        """Client addresses of every server (alive or not)."""
        return [s.address for s in self.servers]

    def server(self, server_id: str) -> JetServer:
        """The server with this id.

        Raises:
            KeyError: no such server.
        """
        for s in self.servers:
            if s.server_id == server_id:
                return s
        raise KeyError(server_id)

    def live(self) -> list[JetServer]:
        """Servers whose process runs and is not paused."""
        return [s for s in self.servers if s.alive and not s.paused]

    @property
    def _secured(self) -> bool:
        """TLS or authentication configured: the plain Metadata probe of
        :meth:`wait_all_registered` gets no answer (the caller waits with its own client)."""
        auth = self.settings.get("auth", {})
        return bool(self.settings.get("tls")) or bool(auth.get("enabled"))

    # ---------------------------------------------------------------- planning

    def _host(self, name: str) -> str:
        return "127.0.0.1" if self.netlab is None else self.netlab.ip(name)

    def _prefix(self, name: str) -> tuple[str, ...]:
        return () if self.netlab is None else tuple(self.netlab.exec_prefix(name))

    def server_dirs(self, server_id: str) -> tuple[Path, Path]:
        """A server's root (config, ready file, log) and data directory."""
        assert self.root is not None
        return self.root / server_id, self.root / server_id / "data"

    def plan_ports(self, ids: list[str]) -> dict[str, tuple[int, int]]:
        """Client and Raft port per server (:attr:`ports`, else free ones now)."""
        if self.ports is not None:
            return {i: self.ports[i] for i in ids}
        chosen = iter(free_ports(2 * len(ids)))
        return {i: (next(chosen), next(chosen)) for i in ids}

    def _plan(self) -> list[JetServer]:
        ids = [f"s{i}" for i in range(1, self.size + 1)]
        ports = self.plan_ports(ids)
        out = []
        for sid in ids:
            root, data_dir = self.server_dirs(sid)
            port, raft_port = ports[sid]
            config = server_config(
                sid,
                root,
                self.nats_url,
                host=self._host(sid),
                port=port,
                data_dir=data_dir,
                log_level=self.log_level,
            )
            if self.clustered:
                config["cluster"] = {
                    "raft_address": f"{self._host(sid)}:{raft_port}",
                    "peers": [f"{o}@{self._host(o)}:{ports[o][1]}" for o in ids if o != sid],
                }
            for section, values in merged_settings(self.settings).items():
                config.setdefault(section, {}).update(values)
            out.append(
                JetServer(
                    sid,
                    root,
                    config,
                    raft_port=raft_port if self.clustered else 0,
                    args=self.server_args,
                    password=self.password if self.clustered else "",
                    trace=self.power_loss,
                    extra_env=dict(self.server_env.get(sid, {})),
                    exec_prefix=(*self._prefix(sid), *self.server_prefix),
                    log_file=self.log_file,
                    new_session=self.new_session,
                )
            )
        return out

    # ---------------------------------------------------------------- the whole cluster

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start nats-server, then every server (all spawned before any is waited for, so
        a Raft group can form); return once all are ready. Everything started is stopped
        again if one fails.

        Raises:
            ValueError: ``size`` is below 1.
            WaitTimeout: a server exited or was not ready in time.
            NatsServerError: nats-server could not start.
        """
        if self.size < 1:
            raise ValueError(f"a cluster runs at least one server, not {self.size}")
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="jet-cluster-"))
            self._own_root = True
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.nats = NatsServer(
                work_dir=self.root / "nats",
                host=self._host("nats"),
                exec_prefix=self._prefix("nats"),
                new_session=self.new_session,
            )
            self.nats.start()
            self.servers = self._plan()
            for s in self.servers:
                s.spawn()
            deadline = time.monotonic() + timeout_s
            for s in self.servers:
                s.wait_ready(max(0.1, deadline - time.monotonic()))
            if self.clustered and self.wait_registered and not self._secured:
                self.wait_all_registered(max(0.1, deadline - time.monotonic()))
        except BaseException:
            # As __exit__ does: a cluster that never became ready says why (its servers'
            # logs go with the data directories when the test's tmp_path is cleaned).
            print(f"\nserver logs (tails) under {self.root}, start failed:\n{self.logs()}")
            self.stop()
            raise

    def wait_all_registered(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until every live server's metadata lists every server (a ready server has
        registered itself, but may not have applied the others' registrations yet).

        Raises:
            WaitTimeout: not within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        for s in self.live():

            def lists_all(s: JetServer = s) -> bool:
                try:
                    listed = metadata_request(s.address, max(0.1, deadline - time.monotonic()))
                except (OSError, CodecError, ValueError):
                    return False
                return len(listed.get("servers", [])) == len(self.servers)

            wait_until(
                lists_all,
                max(0.1, deadline - time.monotonic()),
                f"{s.server_id} lists every server",
            )

    def stop(self) -> None:
        """Stop every server, then nats-server; remove a temporary root.

        Every server gets SIGTERM, then SIGINT: a second stop signal, so a hurried stop,
        which does not wait on the others (they stop too) but still closes its logs and
        writes ``clean_stop`` (spec/cluster.md, "Graceful shutdown"); SIGKILL after a
        bound. (Two SIGTERMs sent together would merge into one pending signal.) Stop one
        server with :meth:`stop_server` for the graceful stop of a server the others
        outlive.
        """
        for s in self.servers:
            if s.alive and s.paused:
                s.resume()
        for sig in (signal.SIGTERM, signal.SIGINT):
            for s in self.servers:
                if s.alive and s.proc is not None:
                    s.proc.send_signal(sig)
        for s in self.servers:
            s.reap()  # not stop(): a third signal would end it at once
        if self.nats is not None:
            self.nats.stop()
        if self._own_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def check(self) -> str | None:
        """A description of the first process that died, or None if all run."""
        for s in self.servers:
            code = None if s.proc is None else s.proc.poll()
            if code is not None:
                return f"jet server {s.server_id} exited with code {code}"
        if self.nats is not None and self.nats.proc is not None:
            code = self.nats.proc.poll()
            if code is not None:
                return f"nats-server exited with code {code}"
        return None

    def restart_nats(self) -> None:
        """Stop nats-server and start it again on the same port."""
        assert self.nats is not None
        self.nats.restart()

    def simulate_power_loss(self) -> dict[str, PowerLossReport]:
        """kill -9 every server at once, then cut each one's files back to their last fsync.

        The servers stay down; start them with :meth:`start_all`.

        Raises:
            WaitTimeout: the cluster was started without ``power_loss=True``.
        """
        if not self.power_loss:
            raise WaitTimeout("the cluster was started without power_loss=True")
        for s in self.servers:
            if s.alive:
                os.kill(s.pid, signal.SIGKILL)
        for s in self.servers:
            s.kill9()
        return {s.server_id: s.apply_power_loss() for s in self.servers}

    def start_all(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start every server that is not running (spawned together, then waited for)."""
        down = [s for s in self.servers if not s.alive]
        for s in down:
            s.spawn()
        for s in down:
            s.wait_ready(timeout_s)

    # ---------------------------------------------------------------- one server

    def kill(self, server_id: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` (default SIGKILL) to one server by PID; reap it if the signal ends
        it (SIGSTOP pauses it instead)."""
        self.server(server_id).signal(sig)

    def stop_server(self, server_id: str, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop one server cleanly (SIGTERM, SIGKILL after ``timeout_s``)."""
        self.server(server_id).stop(timeout_s)

    def start_server(self, server_id: str, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start a stopped or killed server again (same ports, id and data); wait until
        ready.

        Raises:
            WaitTimeout: it is running, exited at start, or was not ready in time.
        """
        self.server(server_id).start(timeout_s)

    # ---------------------------------------------------------------- logs

    def all_logs(self) -> dict[str, str]:
        """Server id -> its whole log file (every incarnation)."""
        out = {}
        for s in self.servers:
            try:
                out[s.server_id] = s.log_path.read_text(errors="replace")
            except FileNotFoundError:
                out[s.server_id] = ""
        return out

    def logs(self, chars: int = 2000) -> str:
        """The tail of every server's log (for failure messages)."""
        return "\n".join(f"==== {s.server_id}\n{s.log_tail(chars)}" for s in self.servers)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            print(f"\nserver logs (tails) under {self.root}:\n{self.logs()}")
        self.stop()
