"""Replicated cluster metadata: the metadata state machine under Raft (PySyncObj).

``metadata_raft.MetadataRaft`` is the interface the server uses (propose, state, leadership,
wait/watch); ``machine`` is the pure state machine applied under Raft; ``host`` hosts
PySyncObj in its own thread; ``incoming`` filters the messages PySyncObj receives;
``journal`` is the durable journal PySyncObj writes; ``bridge`` carries results from that
thread into the event loop; ``config`` and ``errors`` are what their names say.
spec/cluster.md, "Metadata Raft", documents the behaviour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jetsdk.lazy_names import lazy_names
from jetserver.raft.config import RaftConfig, RaftPeer
from jetserver.raft.errors import (
    EntryTooLarge,
    NotLeader,
    OutcomeUnknown,
    ProposalTimeout,
    RaftClosed,
    RaftError,
    RaftStartError,
    RaftTimeout,
    Unavailable,
)

if TYPE_CHECKING:
    from jetserver.raft.host import RaftStatus
    from jetserver.raft.metadata_raft import Applied, MetadataRaft

_LAZY = {
    "RaftStatus": "jetserver.raft.host",
    "Applied": "jetserver.raft.metadata_raft",
    "MetadataRaft": "jetserver.raft.metadata_raft",
}
"""Imported on first use: ``host`` imports PySyncObj (and through it ``cryptography``),
which a server alone never runs; ``jetserver.config`` imports this package's ``config``."""

__getattr__, __dir__ = lazy_names(globals(), _LAZY)

__all__ = [
    "Applied",
    "EntryTooLarge",
    "MetadataRaft",
    "NotLeader",
    "OutcomeUnknown",
    "ProposalTimeout",
    "RaftClosed",
    "RaftConfig",
    "RaftError",
    "RaftPeer",
    "RaftStartError",
    "RaftStatus",
    "RaftTimeout",
    "Unavailable",
]
