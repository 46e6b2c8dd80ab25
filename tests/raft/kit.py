"""Helpers for Raft tests: loopback configs, in-process clusters, bounded leader waits."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from jetserver.metadata.model import StreamSpec
from jetserver.metadata.ops import CreateStream, Op
from jetserver.raft import (
    Applied,
    MetadataRaft,
    NotLeader,
    OutcomeUnknown,
    RaftConfig,
    RaftPeer,
    RaftStatus,
    Unavailable,
)
from jetserver.testing import free_ports

PASSWORD = secrets.token_hex(16)
"""Cluster password of the test clusters."""
LEADER_WAIT_S = 10.0
"""Bound on electing a leader in tests."""
MAX_LEADER_ROUNDS = 200
"""Bound on status changes observed while waiting for an agreed leader."""
FAST_TIMINGS: dict[str, Any] = {
    "heartbeat_s": 0.05,
    "election_timeout_min_s": 0.3,
    "election_timeout_max_s": 0.6,
    "connection_timeout_s": 1.0,
    "leader_fallback_s": 1.0,
}
"""Raft timings of these tests: the Raft layer alone on loopback elects faster than the
servers' defaults (jetserver.raft.config), which leave room for a loaded event loop."""


def make_configs(root: Path, n: int = 3, **overrides: Any) -> list[RaftConfig]:
    """Configs of an ``n``-member loopback group, data under ``root/<server id>``."""
    ids = [f"s{i + 1}" for i in range(n)]
    ports = iter(free_ports(len(ids)))  # distinct: all bound at once
    addresses = {i: f"127.0.0.1:{next(ports)}" for i in ids}
    return [
        RaftConfig(
            server_id=i,
            address=addresses[i],
            peers=tuple(RaftPeer(j, addresses[j]) for j in ids if j != i),
            data_dir=root / i,
            password=PASSWORD,
            **(FAST_TIMINGS | overrides),
        )
        for i in ids
    ]


def create_op(name: str, partitions: int = 1) -> CreateStream:
    """A CreateStream with fixed ids (replicas s1)."""
    spec = StreamSpec(name=name, subject=f"subj.{name}", partitions=partitions)
    return CreateStream(spec, f"id-{name}", 1, tuple(("s1",) for _ in range(partitions)))


@asynccontextmanager
async def running(configs: Sequence[RaftConfig]) -> AsyncIterator[list[MetadataRaft]]:
    """Start one MetadataRaft per config (all stopped on exit)."""
    async with AsyncExitStack() as stack:
        nodes = [await stack.enter_async_context(MetadataRaft(c)) for c in configs]
        yield nodes


async def any_status_change(nodes: Sequence[MetadataRaft], limit_s: float) -> None:
    """Return when the status of any of ``nodes`` changes (or after ``limit_s``)."""
    with anyio.move_on_after(limit_s):
        async with anyio.create_task_group() as tg:

            async def watch(node: MetadataRaft, seen: RaftStatus) -> None:
                await node.wait_status(lambda s: s != seen, timeout=limit_s)
                tg.cancel_scope.cancel()

            for node in nodes:
                tg.start_soon(watch, node, node.status)


async def agreed_leader(
    nodes: Sequence[MetadataRaft], limit_s: float = LEADER_WAIT_S
) -> MetadataRaft:
    """The node all ``nodes`` agree is the leader (bounded in time and rounds)."""
    with anyio.fail_after(limit_s):
        for _ in range(MAX_LEADER_ROUNDS):
            leaders = [n for n in nodes if n.is_leader]
            if len(leaders) == 1 and all(
                n.leader_address == leaders[0].config.address for n in nodes
            ):
                return leaders[0]
            await any_status_change(nodes, limit_s)
    raise AssertionError(f"no agreed leader after {MAX_LEADER_ROUNDS} status changes")


PROPOSE_ATTEMPTS = 5
"""Leader changes one ``propose_agreed`` rides out before it gives up."""


async def propose_agreed(nodes: Sequence[MetadataRaft], op: Op) -> Applied:
    """Propose ``op`` on the agreed leader, as a client does: on a leader change, retry with the
    same op id on the new leader (Raft's idempotency makes the retry apply at most once).

    For tests whose claim is not about leadership: on a loaded machine the leader of a group
    with these fast timings can lose an election between two proposals.
    """
    op_id = secrets.token_hex(16)
    for _ in range(PROPOSE_ATTEMPTS - 1):
        leader = await agreed_leader(nodes)
        try:
            return await leader.propose(op, op_id=op_id)
        except (NotLeader, Unavailable, OutcomeUnknown):
            continue
    return await (await agreed_leader(nodes)).propose(op, op_id=op_id)
