"""The jet server: metadata, NATS link, partitions, Produce service and protocol listener.

Start-up: load metadata, connect to NATS (retrying with backoff), open and recover every
partition log and subscribe it (a server alone with ``[storage] open_in_background_from``
partitions or more: after it is ready, :mod:`jetserver.broker.pending_opens`), subscribe
the ack inboxes, then listen; the bound address is reported through
``task_status.started(address)`` and the optional ready file.

In a cluster (``[cluster]`` configured) the metadata is the metadata Raft member's state
(:class:`~jetserver.cluster.ClusterNode`, started first). Once listening, the server
registers its client address and a new incarnation through Raft (after a crash, which
``clean_stop`` in the data directory tells apart from a clean stop, this takes it out of the
ISRs it shared: its replicas must catch up first), then opens the partitions it
holds replicas of in the replicated state, and only then writes the ready file and logs
"server ready". Replicas then follow every change of the replicated state.

Shutdown (:meth:`Server.request_stop`, SIGTERM/SIGINT in the CLI): in a cluster, the
partition leaderships of this server first move to in-sync followers that answer a probe
now (bounded; see :mod:`jetserver.cluster.handoff`) while it still serves; then new requests get
SHUTTING_DOWN and long polls return; in-flight requests get a grace period; connections
close; ingest stops (unsubscribe); what was already queued is appended; every partition is
flushed, its HW checkpointed and its log closed; pending acks are flushed to NATS. Nothing
acknowledged is lost. A hurried stop (``request_stop(hurry=True)``, a second SIGTERM/SIGINT)
skips the waits on the rest of the cluster and on clients (the handoff, the in-flight
grace, leaving the ISRs); the rest is the same.

Task safety: run one Server per event loop (asyncio backend: nats-py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import attrs
import orjson
from anyio.abc import TaskStatus

from jetsdk.codec.frames import Frame
from jetsdk.codec.limits import ENVELOPE_ALLOWANCE_BYTES
from jetserver.broker.copy_backlog import CopyBacklog
from jetserver.broker.gc_pause import FREEZE_MIN_PARTITIONS, collector_paused
from jetserver.broker.local_streams import LocalStreams
from jetserver.broker.produce import ProduceService
from jetserver.broker.running import MetadataView
from jetserver.broker.streams import StreamManager
from jetserver.config.server import ServerConfig
from jetserver.infra.resources import (
    DataDirLock,
    log_file_limits,
    park_idle_files,
    raise_open_file_limit,
    size_active_files,
)
from jetserver.infra.runtime import event_loop_name
from jetserver.logs import fields
from jetserver.metadata.store import MetadataStore, write_atomic
from jetserver.metrics.cluster import ClusterCounts
from jetserver.metrics.endpoint import serve_metrics
from jetserver.metrics.exposition import MetricsSources, render
from jetserver.natslink.link import NatsLink
from jetserver.protocol.connection import Reply
from jetserver.protocol.gate_port import Session
from jetserver.protocol.handlers import Dispatcher
from jetserver.protocol.listener import ProtocolListener, bind_listener, format_address
from jetserver.security.gate import Security
from jetserver.security.wiring import acl_proposer, connection_setup
from jetserver.security.wiring import bootstrap as bootstrap_acls
from jetserver.storage.files import SEALED_FILES
from jetserver.storage.fsync_runner import FsyncRunner
from jetserver.storage.space import DiskSpace

if TYPE_CHECKING:
    # Imported where a cluster member needs them: a server alone does not import the
    # control plane, its Raft and PySyncObj (about a fifth of a start's imports).
    from jetserver.cluster import ClusterNode

log = logging.getLogger(__name__)

CLEAN_STOP_FILE = "clean_stop"
"""Cluster mode: written in the data directory after a clean stop (every log flushed and
closed), removed at start; its absence at start means the last run crashed."""
SHUTDOWN_GRACE_FRACTION = 0.5
"""Share of shutdown_timeout_s given to in-flight requests before connections close."""


@attrs.define(eq=False)
class Running:
    """What a started server is made of: built complete, in :meth:`Server._run`, once NATS
    is reachable and the listening socket is bound."""

    address: str
    """Bound ``host:port``."""
    link: NatsLink
    """The NATS link."""
    streams: StreamManager
    """Streams and their partitions."""
    local: LocalStreams | None
    """A server alone: its stream operations (None in a cluster)."""
    produce: ProduceService
    """The Produce service."""
    dispatcher: Dispatcher
    """Answers requests."""
    listener: ProtocolListener
    """Accepts client connections."""
    metrics: MetricsSources
    """What the metrics endpoint reports."""


@attrs.define(eq=False)
class Server:
    """One jet server. Call :meth:`run` in a task group; stop it with :meth:`request_stop`.

    :attr:`address`, :attr:`streams`, :attr:`link` and :attr:`metrics` are there from the
    moment ``task_status.started`` reports the address on (before, they raise
    :class:`RuntimeError`); after :meth:`run` returned they show the stopped parts.
    """

    config: ServerConfig
    """Configuration."""
    cluster: ClusterNode | None = None
    """The control plane (set while running, in a cluster only)."""
    metrics_address: str | None = None
    """Bound ``host:port`` of the metrics endpoint (``[metrics] port`` set)."""
    _running: Running | None = None
    _stop: anyio.Event = attrs.field(factory=anyio.Event)
    _hurried: bool = False
    _hurry_scopes: set[anyio.CancelScope] = attrs.field(factory=set)
    """The waits a hurried stop cancels (:meth:`_unless_hurried`)."""
    _inflight: int = 0
    _idle: anyio.Event | None = None
    """Set when no request is in flight (made by a stop that waits for them: no event to
    set after every request)."""

    @property
    def running(self) -> Running:
        """The parts of the running server.

        Raises:
            RuntimeError: not started (or stopped).
        """
        if self._running is None:
            raise RuntimeError("the server is not running")
        return self._running

    @property
    def address(self) -> str:
        """Bound ``host:port`` (see the class doc)."""
        return self.running.address

    @property
    def streams(self) -> StreamManager:
        """Streams (for tests and tools)."""
        return self.running.streams

    @property
    def local_streams(self) -> LocalStreams:
        """A server alone: CreateStream and DeleteStream (for tests and tools).

        Raises:
            RuntimeError: in a cluster (they go through the metadata leader there).
        """
        local = self.running.local
        if local is None:
            raise RuntimeError("create/delete go through jetserver.cluster in a cluster")
        return local

    @property
    def link(self) -> NatsLink:
        """The NATS link."""
        return self.running.link

    @property
    def metrics(self) -> MetricsSources:
        """What the metrics endpoint reports (request counts are kept even without one)."""
        return self.running.metrics

    @property
    def _dispatcher(self) -> Dispatcher:
        return self.running.dispatcher

    def request_stop(self, *, hurry: bool = False) -> None:
        """Begin a clean shutdown; :meth:`run` returns when it is complete.

        ``hurry`` (also after a plain request): skip, or end, the waits on the rest of the
        cluster and on clients: handing leaderships over, the in-flight grace, leaving the
        ISRs (spec/cluster.md, "Graceful shutdown"). Logs are still flushed and closed and
        ``clean_stop`` written. For a whole cluster stopped at once, where those waits can
        only time out (the others stop too).
        """
        self._stop.set()
        if hurry:
            self._hurried = True
            for scope in self._hurry_scopes:
                scope.cancel()

    @contextlib.contextmanager
    def _unless_hurried(self) -> Iterator[None]:
        """Run the block unless the stop is hurried; a hurried stop requested meanwhile
        ends it (at its next checkpoint)."""
        with anyio.CancelScope() as scope:
            if self._hurried:
                scope.cancel()
            self._hurry_scopes.add(scope)
            try:
                yield
            finally:
                self._hurry_scopes.discard(scope)

    async def _handle(self, frame: Frame, session: Session | None = None) -> Reply:
        running = self._running  # (not the property: a call per request)
        if running is None:
            raise RuntimeError("the server is not running")
        self._inflight += 1
        started = time.perf_counter()
        try:
            reply = await running.dispatcher.handle(frame, session)
            running.metrics.requests.observe(frame.api, reply.data, time.perf_counter() - started)
            return reply
        finally:
            self._inflight -= 1
            if self._inflight == 0 and self._idle is not None:
                self._idle.set()

    async def run(self, *, task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until :meth:`request_stop` (or cancellation); report the address when listening.

        Raises:
            MetadataCorrupt: metadata.json does not parse.
            NatsUnavailable / JetServerError: NATS TLS files unusable.
            OSError: the data directory or the listen address is unusable.
        """
        before, after = raise_open_file_limit()
        SEALED_FILES.set_capacity(self.config.storage.open_sealed_files)
        size_active_files(after)  # after the sealed cache's size: the budget is what is left
        data_dir = Path(self.config.server.data_dir)
        lock = DataDirLock(data_dir)
        await anyio.to_thread.run_sync(lock.acquire)
        try:
            # Before the metadata Raft: its writes may need the reserve.
            storage = self.config.storage
            disk = await anyio.to_thread.run_sync(
                DiskSpace.open, data_dir, storage.disk_free_floor_bytes, storage.disk_reserve_bytes
            )
            try:
                async with self._cluster_node() as node:
                    self.cluster = node
                    try:
                        await self._run(node, disk, task_status, (before, after))
                    finally:
                        self.cluster = None
            finally:
                disk.close()
        finally:
            lock.release()

    @contextlib.asynccontextmanager
    async def _cluster_node(self) -> AsyncIterator[ClusterNode | None]:
        if not self.config.cluster.enabled:
            yield None
            return
        from jetserver.cluster import ClusterNode

        async with ClusterNode.open(self.config) as node:
            yield node

    async def _run(
        self,
        node: ClusterNode | None,
        disk: DiskSpace,
        task_status: TaskStatus[str],
        file_limits: tuple[int, int],
    ) -> None:
        """The assembly: metadata, security, NATS, then every part built complete, then
        serve until asked to stop, then the shutdown in order."""
        cfg = self.config
        data_dir = Path(cfg.server.data_dir)
        store, clean = await _open_metadata(node, data_dir)
        log_file_limits(sum(len(m.partitions) for m in store.state.streams.values()), *file_limits)
        # TLS files, password hashes and the internal token are checked before anything starts.
        security = Security(
            cfg,
            lambda: store.state.acls,
            acl_proposer(store, node),
            streams=lambda: store.state.streams,
        )
        link = NatsLink(cfg.nats)
        if not await self._connect(link):
            log.info("stopped before NATS was reachable")
            await link.close()
            return
        _check_nats_payload(link, cfg)
        streams = StreamManager(
            cfg,
            store,
            link,
            controller=node.controller if node is not None else None,
            fsyncs=FsyncRunner(
                on_loop=cfg.storage.fsync_on_loop,
                loop_wait_s=cfg.storage.fsync_loop_wait_ms / 1000,
                large_writes_in_thread=cfg.storage.large_writes_in_thread,
            ),
            disk=disk,
        )
        sock: socket.socket | None = None
        try:
            if node is not None:
                node.attach(streams)
            running, sock = self._assemble(link, streams, node, security)
            self._running = running
            async with anyio.create_task_group() as tg:
                tg.start_soon(disk.run)
                tg.start_soon(park_idle_files)
                await streams.start(tg)
                if running.local is not None:
                    await running.local.open_all()
                await running.produce.start()
                if cfg.metrics.port is not None:
                    metrics = running.metrics
                    self.metrics_address = await tg.start(
                        serve_metrics, cfg.metrics.host, cfg.metrics.port, lambda: render(metrics)
                    )
                if cfg.auth.acls and node is None:
                    await bootstrap_acls(cfg, security)  # in place before the first client
                await self._serve(tg, sock, node, clean, security, task_status)
                with anyio.CancelScope(shield=True):
                    await self._stop_parts(node, data_dir)
                tg.cancel_scope.cancel()
        finally:
            if sock is not None:
                sock.close()  # if serving never began (closing twice does nothing)
            with anyio.CancelScope(shield=True):
                await streams.stop()
                await link.close()
                if cfg.listen.ready_file:
                    _remove(Path(cfg.listen.ready_file))
            log.info("server stopped", extra=fields(server_id=cfg.server.id))

    async def _connect(self, link: NatsLink) -> bool:
        """Connect to NATS (retrying); False if a stop request came first."""
        async with anyio.create_task_group() as connect_tg:

            async def stop_connecting() -> None:
                await self._stop.wait()
                connect_tg.cancel_scope.cancel()

            connect_tg.start_soon(stop_connecting)
            await link.connect()
            connect_tg.cancel_scope.cancel()
        return link.connected

    def _assemble(
        self,
        link: NatsLink,
        streams: StreamManager,
        node: ClusterNode | None,
        security: Security,
    ) -> tuple[Running, socket.socket]:
        """Bind the listening socket, then build the parts (which need its address)."""
        cfg = self.config
        sock = bind_listener(cfg.listen.host, cfg.listen.port, cfg.listen.backlog)
        address = format_address(sock)
        produce = ProduceService(
            link,
            streams,
            cfg.limits,
            direct=cfg.ingest.produce_direct,
            copy_backlog=CopyBacklog(cfg.ingest.copy_backlog_max_bytes),
        )
        store = streams.store
        local = LocalStreams(streams, store) if isinstance(store, MetadataStore) else None
        dispatcher = Dispatcher(
            cfg,
            streams,
            produce,
            address=cfg.listen.advertise or address,
            cluster=node,
            local=local,
            security=security,
        )
        listener = ProtocolListener(
            self._handle,
            cfg.limits,
            sendfile_min_bytes=cfg.fetch.sendfile_threshold,
            setup=connection_setup(security, self._handle),
            at_once=dispatcher.produce_now,
        )
        metrics = MetricsSources(
            cfg.server.id,
            streams=streams,
            link=link,
            copies=produce.copy_backlog,
            listener=listener,
            consumer_positions=dispatcher.consumer_positions,
            disk=streams.disk,
            cluster=ClusterCounts(
                streams.streams,
                dispatcher.is_down,
                (lambda: node.raft.is_leader) if node is not None else (lambda: True),
            ).lines,
        )
        dispatcher.observe = metrics.requests.observe  # (the requests answered at once)
        return Running(address, link, streams, local, produce, dispatcher, listener, metrics), sock

    async def _serve(
        self,
        tg: anyio.abc.TaskGroup,
        sock: socket.socket,
        node: ClusterNode | None,
        clean: bool,
        security: Security,
        task_status: TaskStatus[str],
    ) -> None:
        """Listen on ``sock``, announce readiness, serve until a stop request; then hand
        leaderships off, refuse new requests and give in-flight ones their grace period."""
        cfg, running = self.config, self.running
        with anyio.CancelScope() as listen_scope:
            async with anyio.create_task_group() as listen_tg:
                listen_tg.start_soon(running.listener.serve, sock)
                task_status.started(running.address)
                if node is not None:
                    node.start(running.dispatcher.address, clean=clean)
                    await _first(node.reconciled.wait, self._stop.wait)
                log.info(  # (before the ready file: whoever saw the file finds the line)
                    "server ready",
                    extra=fields(
                        server_id=cfg.server.id,
                        address=running.address,
                        data_dir=cfg.server.data_dir,
                        streams=len(running.streams.store.state.streams),
                        fetch_io=cfg.fetch.io,
                        cluster=node is not None,
                        event_loop=event_loop_name(),
                    ),
                )
                if cfg.listen.ready_file and not self._stop.is_set():
                    _write_ready_file(
                        Path(cfg.listen.ready_file), running.address, self.metrics_address
                    )
                running.streams.open_pending()  # a server alone with many partitions
                if node is not None:
                    if cfg.auth.acls:
                        tg.start_soon(bootstrap_acls, cfg, security)  # needs Raft
                    outages = anyio.CancelScope()
                    tg.start_soon(_hand_off_during_outages, outages, node, running)
                    await self._stop.wait()
                    outages.cancel()
                else:
                    await self._stop.wait()
                log.info("shutting down")
                if node is not None:
                    from jetserver.cluster.handoff import (
                        HANDOFF_TIMEOUT_FRACTION,
                        hand_off_leaderships,
                    )

                    # Still serving: move partition leaderships to in-sync followers first,
                    # so producers fail over without a timeout. The replicas that become
                    # followers do not fetch (they would rejoin the ISRs they just left).
                    node.controller.stopping = True
                    with self._unless_hurried():
                        await hand_off_leaderships(
                            node.raft,
                            running.streams,
                            cfg.server.id,
                            cfg.server.shutdown_timeout_s * HANDOFF_TIMEOUT_FRACTION,
                            node.liveness,  # only to ISR members that answer now
                        )
                running.dispatcher.shutting_down = True
                running.streams.wake_all()
                if self._inflight:
                    self._idle = anyio.Event()
                    with (
                        self._unless_hurried(),
                        anyio.move_on_after(
                            cfg.server.shutdown_timeout_s * SHUTDOWN_GRACE_FRACTION
                        ),
                    ):
                        await self._idle.wait()
                listen_scope.cancel()

    async def _stop_parts(self, node: ClusterNode | None, data_dir: Path) -> None:
        """Stop the parts in order (shielded by the caller): what was queued is appended,
        every log flushed and closed; in a cluster, leave the ISRs and mark a clean stop."""
        cfg, running = self.config, self.running
        if node is not None:
            await node.stop_tasks()
        await running.produce.stop()
        clean = await running.streams.stop()
        if node is not None:
            from jetserver.cluster.handoff import HANDOFF_TIMEOUT_FRACTION, leave_isrs

            # The replicas stopped fetching: leave the ISRs so that their leaders commit
            # without waiting for this server.
            with self._unless_hurried():
                await leave_isrs(
                    node.raft,
                    cfg.server.id,
                    cfg.server.shutdown_timeout_s * HANDOFF_TIMEOUT_FRACTION,
                )
            if clean:
                await anyio.to_thread.run_sync(write_atomic, data_dir / CLEAN_STOP_FILE, b"{}\n")


async def _open_metadata(node: ClusterNode | None, data_dir: Path) -> tuple[MetadataView, bool]:
    """The metadata (the single-server store, or the cluster's Raft state) and, in a cluster,
    whether the last run stopped cleanly (the marker is taken)."""
    if node is None:
        # Long-lived objects (3 the collector tracks per partition), walked by its
        # collections again and again while they were made; frozen after (see gc_pause).
        # At 50,000 partitions: 0.35 instead of 0.47 CPU-s with the start's pending queue.
        with collector_paused(FREEZE_MIN_PARTITIONS):
            return await anyio.to_thread.run_sync(MetadataStore.open, data_dir), False
    clean = await anyio.to_thread.run_sync(_take_clean_marker, data_dir)
    return node.raft, clean


async def _hand_off_during_outages(
    scope: anyio.CancelScope, node: ClusterNode, running: Running
) -> None:
    from jetserver.cluster.handoff import hand_off_during_nats_outages

    with scope:
        await hand_off_during_nats_outages(
            running.link, node.raft, running.streams, node.config.server.id, node.liveness
        )


async def _first(*waits: Callable[[], Awaitable[object]]) -> None:
    """Return as soon as one of ``waits`` returns."""
    async with anyio.create_task_group() as tg:

        async def run(wait: Callable[[], Awaitable[object]]) -> None:
            await wait()
            tg.cancel_scope.cancel()

        for wait in waits:
            tg.start_soon(run, wait)


def _take_clean_marker(data_dir: Path) -> bool:
    """True if the previous run stopped cleanly; removes the marker (durably) so that a
    crash of this run is seen as one at the next start."""
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        (data_dir / CLEAN_STOP_FILE).unlink()
    except FileNotFoundError:
        return False
    dir_fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return True


def _check_nats_payload(link: NatsLink, cfg: ServerConfig) -> None:
    """Warn if NATS refuses payloads our message limit allows (envelope included)."""
    needed = cfg.limits.max_message_bytes + ENVELOPE_ALLOWANCE_BYTES
    if link.max_payload and link.max_payload < needed:
        log.warning(
            "NATS max_payload is below max_message_bytes plus the envelope: messages near "
            "the limit will be refused (raise max_payload in the nats-server config, or "
            "lower limits.max_message_bytes)",
            extra=fields(
                nats_max_payload=link.max_payload,
                max_message_bytes=cfg.limits.max_message_bytes,
            ),
        )


def _write_ready_file(path: Path, address: str, metrics_address: str | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    info: dict[str, object] = {"address": address, "pid": os.getpid()}
    if metrics_address is not None:
        info["metrics_address"] = metrics_address
    write_atomic(path, orjson.dumps(info))


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
