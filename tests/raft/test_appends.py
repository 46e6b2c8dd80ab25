"""A follower's AppendEntries: Raft's rule (§5.3, Figure 2), not PySyncObj 0.3.17's.

PySyncObj's follower deleted every entry after ``prevLogIdx`` and appended the message's
entries; Raft deletes only from the first entry whose term conflicts. The first test drives
a real follower (its transport callback, its durable journal) with crafted messages; the
second shows the consequence in a real group: an entry the leader committed on the
follower's acknowledgement is lost after the leader's death when a duplicated, shorter
message reached the follower.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import SyncObj

from jetserver.raft import MetadataRaft, RaftConfig
from jetserver.raft.host import RaftHost
from jetserver.raft.incoming import PATCHED_METHOD_SHA256, PYSYNCOBJ_METHOD
from jetserver.raft.journal import DurableJournal
from raft.kit import agreed_leader, create_op, make_configs, propose_agreed

WAIT_S = 10.0
NOOP = b"\x01"
"""PySyncObj's no-op command type: never a cluster change, never applied here (no ticks)."""
TRUNCATION = "truncating already-applied"
"""The CRITICAL PySyncObj logs when it deletes applied entries."""
STEADY = {"election_timeout_min_s": 2.0, "election_timeout_max_s": 4.0, "connection_timeout_s": 4.0}
"""A leader that stays put for the scenario (heartbeats stay fast)."""


def _entries(*index_terms: tuple[int, int]) -> list[tuple[bytes, int, int]]:
    return [(NOOP, index, term) for index, term in index_terms]


class Follower:
    """A real PySyncObj member built by RaftHost (real journal file), never ticked: the test
    delivers messages to its transport callback and reads the replies it sends."""

    def __init__(self, config: RaftConfig, leader_address: str) -> None:
        self.host = RaftHost(config, lambda: None)
        self.obj = self.host._build()
        transport = self.obj._SyncObj__transport
        self.deliver: Callable[[Any, Any], None] = transport._onMessageReceivedCallback
        self.replies: list[dict[str, Any]] = []
        transport.send = lambda node, message: self.replies.append(message) or True
        self.leader = next(n for n in self.obj.otherNodes if str(n.id) == leader_address)

    def append(
        self, term: int, prev: tuple[int, int], entries: list[Any], commit: int
    ) -> dict[str, Any]:
        self.deliver(
            self.leader,
            {
                "type": "append_entries",
                "term": term,
                "commit_index": commit,
                "entries": entries,
                "prevLogIdx": prev[0],
                "prevLogTerm": prev[1],
            },
        )
        return self.replies[-1]

    def log(self) -> list[tuple[int, int]]:
        journal = self.obj._SyncObj__raftLog
        return [(index, term) for _, index, term in journal[:]]

    def commit_index(self) -> int:
        return int(self.obj.raftCommitIndex)


def test_a_follower_truncates_only_from_the_first_conflict(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    configs = make_configs(tmp_path)
    follower = Follower(configs[1], configs[0].address)
    try:
        assert follower.log() == [(1, 0)]
        reply = follower.append(1, (1, 0), _entries((2, 1), (3, 1), (4, 1)), commit=1)
        assert (reply["success"], reply["next_node_idx"]) == (True, 5)
        follower.append(1, (4, 1), [], commit=3)
        assert follower.commit_index() == 3
        follower.obj._SyncObj__raftLastApplied = 3  # as if its ticks had applied 2-3
        # The leader's earlier, shorter message again (duplicated or reordered): entry 2 is
        # held with its term, nothing conflicts, 3 and 4 stay. The acknowledgement vouches
        # for entry 2 only (all the message verified).
        with caplog.at_level(logging.CRITICAL):
            reply = follower.append(1, (1, 0), _entries((2, 1)), commit=3)
        assert not [r for r in caplog.records if TRUNCATION in r.getMessage()]
        assert follower.log() == [(1, 0), (2, 1), (3, 1), (4, 1)]
        assert (reply["success"], reply["reset"], reply["next_node_idx"]) == (True, False, 3)
        assert follower.commit_index() == 3
        # A new leader's first heartbeat, prevLogIdx its last entry (3): entry 4 stays.
        reply = follower.append(2, (3, 1), [], commit=3)
        assert follower.log() == [(1, 0), (2, 1), (3, 1), (4, 1)]
        assert (reply["success"], reply["next_node_idx"]) == (True, 4)
        # Its entries from 3: 3 is held with the same term (kept), 4 conflicts (term 1
        # against 2) and is deleted with what follows, then 4 and 5 are appended.
        reply = follower.append(2, (2, 1), _entries((3, 1), (4, 2), (5, 2)), commit=3)
        assert follower.log() == [(1, 0), (2, 1), (3, 1), (4, 2), (5, 2)]
        assert (reply["success"], reply["next_node_idx"]) == (True, 6)
        # The commit index follows the leader's only up to the last entry the message
        # carries or names (Figure 2: min(leaderCommit, index of last new entry)).
        reply = follower.append(2, (3, 1), [], commit=5)
        assert (follower.commit_index(), reply["next_node_idx"]) == (3, 4)
        assert len(follower.log()) == 5
        reply = follower.append(2, (4, 2), _entries((5, 2)), commit=5)
        assert (follower.commit_index(), reply["next_node_idx"]) == (5, 6)
        # A mismatch at prevLogIdx is still answered with a reset, nothing deleted.
        reply = follower.append(2, (5, 1), _entries((6, 2)), commit=5)
        assert (reply["success"], reply["reset"]) == (False, True)
        assert len(follower.log()) == 5
    finally:
        follower.host._destroy(follower.obj)
    # The journal on disk holds what the follower held in memory.
    journal = DurableJournal(configs[1].journal_path)
    try:
        assert [(index, term) for _, index, term in journal[:]] == [
            (1, 0),
            (2, 1),
            (3, 1),
            (4, 2),
            (5, 2),
        ]
    finally:
        journal._destroy()


class DuplicateOnce:
    """Wraps the leader's transport ``send``: the first AppendEntries with entries to
    ``target`` (m1) is kept; when a later one carries entries past m1's, m1 is sent again
    right after it (a duplicated message), and from then on nothing reaches ``target``."""

    def __init__(self, obj: Any, target: str) -> None:
        self.transport = obj._SyncObj__transport
        self.send = self.transport.send
        self.target = target
        self.first: dict[str, Any] | None = None
        self.duplicated = False
        self.transport.send = self.wrapped

    def wrapped(self, node: Any, message: Any) -> Any:
        if str(node.id) != self.target:
            return self.send(node, message)
        if self.duplicated:
            return True  # dropped: the follower keeps what the duplicate left it
        entries = message.get("entries") if isinstance(message, dict) else None
        if message.get("type") != "append_entries" or not entries:
            return self.send(node, message)
        if self.first is None:
            self.first = dict(message)
            return self.send(node, message)
        sent = self.send(node, message)
        if entries[0][1] > self.first["entries"][-1][1]:
            self.send(node, self.first)
            self.duplicated = True
        return sent


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_committed_entry_survives_a_duplicate_then_the_leaders_death(
    tmp_path: Path,
) -> None:
    configs = make_configs(tmp_path, **STEADY)
    async with AsyncExitStack() as stack:
        nodes = [await stack.enter_async_context(MetadataRaft(c)) for c in configs]
        leader = await agreed_leader(nodes)
        follower, stopped = [n for n in nodes if n is not leader]
        base = await leader.propose(create_op("base"))
        await stopped.wait_applied(base.index, timeout=WAIT_S)
        await stopped.aclose()  # the group is the leader and the follower: commits need both
        assert leader._host is not None
        duplicate = DuplicateOnce(leader._host._obj, follower.config.address)
        await leader.propose(create_op("a"))
        b = await leader.propose(create_op("b"))  # committed: the follower acknowledged it
        assert b.result.created
        assert duplicate.duplicated
        term = leader.status.term
        await leader.aclose()
        restarted = await stack.enter_async_context(MetadataRaft(stopped.config))
        survivors = [follower, restarted]
        new_leader = await agreed_leader(survivors)
        assert new_leader.status.term > term
        after = await propose_agreed(survivors, create_op("after"))
        for node in survivors:
            state = await node.wait_applied(after.index, timeout=WAIT_S)
            assert {"base", "a", "b", "after"} <= state.streams.keys()


def test_the_patched_pysyncobj_method_is_the_one_reviewed() -> None:
    """:mod:`jetserver.raft.incoming` corrects PySyncObj's message handler as it is in 0.3.17:
    a different handler must be reviewed again (and the digest updated)."""
    source = inspect.getsource(getattr(SyncObj, PYSYNCOBJ_METHOD))
    assert hashlib.sha256(source.encode()).hexdigest() == PATCHED_METHOD_SHA256
