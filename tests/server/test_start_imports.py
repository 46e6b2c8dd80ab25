"""What a server alone imports (issue 37): not the cluster's control plane nor its Raft,
nor the SDK's group and share members.

Every test that starts a server pays for its imports in CPU (most of a start's 0.9 CPU-s
is them). A server without ``[cluster]`` runs none of the control plane, the metadata
Raft or PySyncObj (and, through it, ``cryptography``): they are imported where a cluster
member needs them. Its gate reads group and share records (``jetsdk.group.records``,
``jetsdk.share.records``), not the state machines of those packages. Checked on a real
``jet server`` process, from spawn to stop, by the interpreter's own import report
(``PYTHONPROFILEIMPORTTIME``, in its log).
"""

from __future__ import annotations

import re
from pathlib import Path

import jetsdk.group
import jetsdk.share
import jetserver.cluster
import jetserver.raft
from jetsdk.group import member as group_member
from jetsdk.share import member as share_member
from jetserver.cluster import node
from jetserver.raft import host, metadata_raft
from jetserver.testing import JetServer, NatsServer, server_config

NOT_IMPORTED = (
    "pysyncobj",
    "cryptography",
    "jetserver.raft.host",
    "jetserver.raft.metadata_raft",
    "jetserver.raft.journal",
    "jetserver.cluster.node",
    "jetserver.cluster.controller",
    "jetserver.cluster.handoff",
    "jetsdk.group.member",
    "jetsdk.group.state",
    "jetsdk.group.assignors",
    "jetsdk.share.member",
    "jetsdk.share.state",
)
"""Modules (and packages, with their submodules) a server alone must not import."""

IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$", re.MULTILINE)


def test_a_server_alone_imports_no_cluster_module(nats_server: NatsServer, tmp_path: Path) -> None:
    server = JetServer(
        "s1",
        tmp_path,
        server_config("s1", tmp_path, nats_server.url),
        extra_env={"PYTHONPROFILEIMPORTTIME": "1"},
    )
    server.start()
    assert server.stop() == 0
    log = server.log_path.read_text()
    assert "server stopped" in log
    loaded = set(IMPORT_LINE.findall(log))
    assert {"jetserver.server", "jetserver.cluster", "jetserver.raft"} <= loaded
    unwanted = [
        name
        for name in loaded
        if any(name.split(".")[: len(n.split("."))] == n.split(".") for n in NOT_IMPORTED)
    ]
    assert sorted(unwanted) == []


def test_the_lazy_names_resolve_on_first_use() -> None:
    assert jetserver.cluster.ClusterNode is node.ClusterNode
    assert jetserver.raft.MetadataRaft is metadata_raft.MetadataRaft
    assert jetserver.raft.RaftStatus is host.RaftStatus
    assert jetsdk.group.GroupMember is group_member.GroupMember
    assert jetsdk.share.ShareMember is share_member.ShareMember
    for package in (jetserver.cluster, jetserver.raft, jetsdk.group, jetsdk.share):
        assert sorted(dir(package)) == sorted(package.__all__)
        for name in package.__all__:
            assert getattr(package, name) is not None
