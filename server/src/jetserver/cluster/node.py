"""This server as a member of a cluster: the metadata Raft member and the control-plane tasks.

:meth:`ClusterNode.open` starts the metadata Raft member (recovering its journal and
snapshot) and the peer connections. The server then builds its
:class:`~jetserver.broker.streams.StreamManager` over ``node.raft`` with ``node.controller``,
calls :meth:`ClusterNode.attach`, starts listening, and calls :meth:`ClusterNode.start` with
its client address, which runs until the block exits:

- registration: RegisterServer(id, client address, Raft address, incarnation, clean)
  through Raft until applied. The incarnation is new at every start; after an unclean stop
  the state machine takes this server out of the ISRs it shares and moves the leaderships
  it held (see :class:`~jetserver.metadata.ops.RegisterServer`): a replica restarted after a
  crash is not in sync until it has caught up again;
- reconciliation, only once registered (so a restarted server never acts on the roles it
  had before): each new replicated state (and the moment this member has caught up with
  the leader's log) is handed to ``StreamManager.reconcile``; :attr:`ClusterNode.reconciled`
  is set after the first one;
- liveness probes of the other registered servers (:mod:`.liveness`);
- elections of a gone server's partitions while this server leads the metadata
  (:mod:`.takeover`);
- preferred-leader rounds while this server leads the metadata (:mod:`.rebalance`).

Task safety: one event loop (the server's).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import attrs

from jetserver.broker.live_settings import LiveLogSettings
from jetserver.broker.streams import StreamManager
from jetserver.cluster.bootstrap import raft_config
from jetserver.cluster.controller import Controller, backoff_s
from jetserver.cluster.elections import Elections
from jetserver.cluster.forwarding import MetadataRequests
from jetserver.cluster.liveness import Liveness
from jetserver.cluster.peers import PeerPool
from jetserver.cluster.rebalance import LeaderRebalancer, unsettled
from jetserver.cluster.report_hold import ReportHold
from jetserver.cluster.takeover import Takeover
from jetserver.config.server import ServerConfig
from jetserver.logs import fields
from jetserver.metadata.model import MetadataState, RegisteredServer
from jetserver.metadata.ops import RegisterServer
from jetserver.raft import MetadataRaft, OutcomeUnknown, RaftClosed, RaftConfig, Unavailable
from jetserver.security.peer import PeerSecurity

log = logging.getLogger(__name__)

METADATA_ELECTION_STAGGER_S = 0.3
"""Between the hastened metadata elections of the surviving members, by rank (server id
order), when the metadata leader's process is gone: the first asks for votes at once, the
next only if that one has not won meanwhile."""
REGISTER_PROPOSE_TIMEOUT_S = 5.0
"""Bound on one RegisterServer proposal (retried until applied)."""


@attrs.define(eq=False)
class ClusterNode:
    """The control plane of one server (see the module docstring)."""

    config: ServerConfig
    """Server configuration (``[cluster]`` set)."""
    raft: MetadataRaft
    """The metadata Raft member."""
    peers: PeerPool
    """Client-protocol connections to the other servers."""
    liveness: Liveness
    """Which servers answer."""
    elections: Elections
    """Partition leader elections (acting while this server is the metadata leader)."""
    controller: Controller
    """Handed to replicas (ISR changes, silent-leader reports)."""
    rebalancer: LeaderRebalancer
    """Preferred-leader rounds (acting while this server is the metadata leader)."""
    takeover: Takeover
    """Elections of gone servers' partitions (acting while this server is the metadata
    leader)."""
    requests: MetadataRequests | None = None
    """CreateStream / DeleteStream (after :meth:`attach`)."""
    streams: StreamManager | None = None
    """This server's replicas (after :meth:`attach`)."""
    client_address: str = ""
    """The client address registered (after :meth:`start`)."""
    registered: anyio.Event = attrs.field(factory=anyio.Event)
    """Set once this server's RegisterServer is applied here."""
    reconciled: anyio.Event = attrs.field(factory=anyio.Event)
    """Set once the local replicas were reconciled after registration."""
    incarnation: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    """Id of this run of the server (registered at start)."""
    clean_start: bool = False
    """The previous run stopped cleanly (registered at start)."""
    _tg: anyio.abc.TaskGroup | None = None
    _dirty: anyio.Event = attrs.field(factory=anyio.Event)
    _log_settings: LiveLogSettings = attrs.field(factory=LiveLogSettings)  # UpdateStream
    _tasks_scope: anyio.CancelScope = attrs.field(factory=anyio.CancelScope)

    @classmethod
    @asynccontextmanager
    async def open(
        cls, config: ServerConfig, raft: RaftConfig | None = None
    ) -> AsyncIterator[ClusterNode]:
        """Start the Raft member and the peer pool; stop everything when the block exits.

        Args:
            config: the server configuration (with ``[cluster]``).
            raft: the Raft configuration (default: :func:`~.bootstrap.raft_config`).

        Raises:
            ConfigError: no usable password or member list.
            RaftStartError: the Raft port or the Raft data cannot be used.
        """
        raft_cfg = raft if raft is not None else raft_config(config)
        server_id = config.server.id
        async with MetadataRaft(raft_cfg) as member, anyio.create_task_group() as tg:
            peers = PeerPool(security=PeerSecurity.from_config(config))
            peers.start(tg)

            def current_state() -> MetadataState:
                return member.state

            liveness = Liveness(
                server_id, peers, current_state, interval_s=config.cluster.probe_interval_s
            )
            elections = Elections(
                member, liveness.is_down, window_s=config.cluster.leader_silent_window_s
            )
            controller = Controller(
                server_id,
                member,
                peers,
                elections,
                lambda: member.state.client_addresses(),
                heard_at=liveness.heard_at,
                is_down=liveness.is_down,
                is_gone=liveness.gone,
                hold=ReportHold(member, liveness.gone, liveness.is_down),
                server_down_event=liveness.down_event,
                server_up_event=liveness.up_event,
            )
            rebalancer = LeaderRebalancer(
                member,
                liveness.is_down,
                unsettled(liveness.is_down, liveness.answering_for),
                enabled=config.cluster.auto_leader_rebalance,
                interval_s=config.cluster.leader_rebalance_interval_s,
                max_per_round=config.cluster.leader_rebalance_max,
            )
            takeover = Takeover(member, elections, liveness.gone, liveness.answered_lately)
            node = cls(
                config, member, peers, liveness, elections, controller, rebalancer, takeover, tg=tg
            )
            liveness.on_refused = node._server_gone
            peers.on_lost = liveness.probe_soon
            try:
                yield node
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await peers.aclose()

    def _server_gone(self, server_id: str) -> None:
        """A server refused this server's probe: if it led the metadata Raft, elect another
        now rather than after the election timeout (1-2 s, and more when votes split),
        which every partition leadership it held waits for. The surviving members stagger
        their elections by their rank (``METADATA_ELECTION_STAGGER_S`` apart), and a term
        after that without a leader comes within 0.4-1.6 s
        (:data:`jetserver.raft.election_timing.HASTENED_RETRY_S`: a split vote). Also when
        no leader is known any more (another survivor stands already). The metadata
        leader elects its partitions at once (:mod:`.takeover`)."""
        self.takeover.server_gone(server_id)
        status = self.raft.status
        peers = dict(self.config.cluster.peer_list())
        if status.is_leader:
            return
        if status.leader_id is None:
            # Another survivor that found the death first stands already: this one joins
            # the short retries too (it may hold the longer log, which the other cannot
            # win against).
            address = peers.get(server_id)
        elif status.leader_id == server_id:
            address = status.leader_address
        else:
            return
        if address is None:
            return
        me = self.config.server.id
        members = sorted({me, *peers} - {server_id})
        rank = members.index(me) if me in members else 0
        self.raft.hasten_election(address, rank * METADATA_ELECTION_STAGGER_S)

    def attach(self, streams: StreamManager) -> None:
        """Give the node this server's StreamManager (before :meth:`start`)."""
        self.streams = streams
        self.requests = MetadataRequests(
            self.config, self.raft, self.peers, self.liveness, streams, self.rebalancer
        )

    def start(self, client_address: str, *, clean: bool = False) -> None:
        """Start registration, reconciliation and liveness probes (until the block exits).

        Args:
            client_address: ``host:port`` other servers and clients reach this server at.
            clean: the previous run of this server stopped cleanly (every log flushed).
        """
        assert self._tg is not None
        assert self.streams is not None
        self.client_address = client_address
        self.clean_start = clean
        self._tg.start_soon(self._run_tasks)

    async def _run_tasks(self) -> None:
        with self._tasks_scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._register)
                tg.start_soon(self._watch_state)  # the reconciler wakes in the dispatch step
                tg.start_soon(self._watch_ready)
                tg.start_soon(self._reconciler)
                tg.start_soon(self.liveness.run)
                tg.start_soon(self.rebalancer.run)
                tg.start_soon(self.takeover.run)
                if self.controller.hold is not None:
                    tg.start_soon(self.controller.hold.run)
                tg.start_soon(self.elections.watch_unreported)

    async def stop_tasks(self) -> None:
        """Stop the background tasks now (before the replicas are closed at shutdown)."""
        self._tasks_scope.cancel()

    # ------------------------------------------------------------------ registration

    async def _register(self) -> None:
        """Propose this run's registration until it is applied here."""
        cluster = self.config.cluster
        assert cluster.raft_address is not None
        me = self.config.server.id
        record = RegisteredServer(me, self.client_address, cluster.raft_address, self.incarnation)
        op = RegisterServer(
            me, self.client_address, cluster.raft_address, self.incarnation, self.clean_start
        )
        op_id = f"register-{uuid.uuid4().hex}"
        attempt = 0
        started = time.monotonic()
        while self.raft.state.servers.get(me) != record:
            attempt += 1
            try:
                applied = await self.raft.propose(
                    op, op_id=op_id, timeout=REGISTER_PROPOSE_TIMEOUT_S, forward=True
                )
                if applied.result.message:
                    log.info(
                        "restart registered after an unclean stop",
                        extra=fields(server_id=me, change=applied.result.message),
                    )
                continue
            except RaftClosed:
                return
            except (Unavailable, OutcomeUnknown) as exc:
                log.debug("registration retried", extra=fields(error=str(exc), attempt=attempt))
            await anyio.sleep(backoff_s(attempt))
        log.info(
            "server registered",
            extra=fields(
                server_id=me,
                client_address=self.client_address,
                raft_address=cluster.raft_address,
                incarnation=self.incarnation,
                clean=self.clean_start,
                after_s=round(time.monotonic() - started, 3),
            ),
        )
        self.registered.set()
        self._dirty.set()

    # ------------------------------------------------------------------ reconciliation

    async def _watch_state(self) -> None:
        """Wake the reconciler at each new applied state, from the Raft dispatcher's own
        step (:meth:`MetadataRaft.on_state`), until cancelled."""
        remove = self.raft.on_state(self._state_changed)
        try:
            self._dirty.set()
            await anyio.sleep_forever()
        finally:
            remove()

    def _state_changed(self) -> None:
        self._dirty.set()

    async def _watch_ready(self) -> None:
        async for status in self.raft.watch_status():
            if status.ready:
                self._dirty.set()
                return

    async def _reconciler(self) -> None:
        assert self.streams is not None
        await self.registered.wait()
        while True:
            await self._dirty.wait()
            self._dirty = anyio.Event()
            try:
                await self.streams.reconcile(self.raft.state, collect=self.raft.status.ready)
                self._log_settings.apply(self.streams, self.raft.state.streams.values())
            except Exception:
                log.exception("reconciling replicas with the metadata failed")
                await anyio.sleep(1.0)
                self._dirty.set()
            else:
                self.reconciled.set()
