"""Pure parts: grant matching, SetAcl in the metadata state machine, config parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetserver.config.load import load_config
from jetserver.errors import ConfigError
from jetserver.metadata.model import Grant, MetadataState
from jetserver.metadata.op_codec import op_from_dict
from jetserver.metadata.ops import SetAcl, apply
from jetserver.raft.machine import (
    Entry,
    MachineState,
    apply_entry,
    encode_entry,
    machine_from_dict,
    machine_to_dict,
)
from jetserver.security import acl
from jetserver.security.grants import bootstrap_acls, grants_from_request
from jetserver.security.passwords import hash_token, parse_entry
from jetserver.security.peer import PeerSecurity


def test_patterns() -> None:
    grants = (Grant("publish", "orders.*"), Grant("fetch", "*"), Grant("group", "etl-*"))
    assert acl.allows(grants, "publish", "orders.eu")
    assert not acl.allows(grants, "publish", "payments")
    assert acl.allows(grants, "fetch", "payments")
    assert not acl.allows(grants, "fetch", "__groups")  # '*' does not reach internal streams
    assert acl.allows((Grant("fetch", "__*"),), "fetch", "__groups")
    assert acl.allows_group(grants, "etl-7")
    assert not acl.allows_group(grants, "billing")
    assert not acl.is_cluster_admin((Grant("admin", "orders.*"),))
    assert acl.is_cluster_admin((Grant("admin", "*"),))
    assert acl.allows_any(grants, "orders.x")
    assert not acl.allows_any((Grant("group", "*"),), "orders.x")


def test_grant_requests() -> None:
    identity, grants = grants_from_request(
        {"identity": "bob", "grants": [{"permission": "fetch", "pattern": "a*"}] * 2}
    )
    assert (identity, grants) == ("bob", (Grant("fetch", "a*"),))
    for bad in (
        {"identity": "__internal", "grants": []},
        {"identity": "b b", "grants": []},
        {"identity": "bob", "grants": [{"permission": "root", "pattern": "*"}]},
        {"identity": "bob", "grants": [{"permission": "fetch", "pattern": ""}]},
        {"identity": "bob", "grants": "fetch"},
    ):
        with pytest.raises(ValueError, match=r"."):
            grants_from_request(bad)
    assert bootstrap_acls(["a:fetch,publish:x.*", "a:fetch:x.*", "b:group:g"]) == {
        "a": (Grant("fetch", "x.*"), Grant("publish", "x.*")),
        "b": (Grant("group", "g"),),
    }


def test_set_acl_op_is_deterministic_and_round_trips() -> None:
    op = SetAcl("alice", (Grant("publish", "orders.*"),))
    assert op_from_dict(op.to_dict()) == op
    state, result = apply(MetadataState(), op)
    assert result.ok
    assert state.acls == {"alice": op.grants}
    again, _ = apply(state, op)
    assert again.acls is state.acls  # same grants: nothing changes
    assert MetadataState.from_dict(state.to_dict()) == state
    assert "acls" not in MetadataState().to_dict()
    cleared, _ = apply(state, SetAcl("alice", ()))
    assert cleared.acls == {"alice": ()}


def test_acls_survive_raft_entries_and_snapshots() -> None:
    entry = Entry("x", SetAcl("alice", (Grant("fetch", "*"),)))
    state, outcome = apply_entry(MachineState(), encode_entry(entry))
    assert outcome.result.ok
    restored = machine_from_dict(machine_to_dict(state))
    assert restored.metadata.acls == {"alice": (Grant("fetch", "*"),)}


def test_auth_config_checks() -> None:
    with pytest.raises(ConfigError, match="identity=hash"):
        load_config(None, {}, {("auth", "users"): ("alice",)})
    with pytest.raises(ConfigError, match="jet passwd"):
        load_config(None, {}, {("auth", "users"): ("alice=plain",)})
    with pytest.raises(ConfigError, match="acl"):
        load_config(None, {}, {("auth", "acls"): ("alice:root:*",)})
    with pytest.raises(ConfigError, match="internal_token"):
        load_config(None, {}, {("auth", "internal_token"): "short"})
    env = {"JET_AUTH_ACLS": "ops:admin:*,alice:publish+fetch:orders.*"}
    assert bootstrap_acls(load_config(None, env, {}).auth.acls) == {
        "ops": (Grant("admin", "*"),),
        "alice": (Grant("publish", "orders.*"), Grant("fetch", "orders.*")),
    }
    entry = f"ci={hash_token('t')}"
    config = load_config(None, {"JET_AUTH_ENABLED": "true", "JET_AUTH_TOKENS": entry}, {})
    assert config.auth.enabled
    assert parse_entry(config.auth.tokens[0]) == ("ci", hash_token("t"))


def test_cluster_with_auth_needs_an_internal_token(tmp_path: Path) -> None:
    cluster = {
        ("cluster", "raft_address"): "127.0.0.1:7001",
        ("cluster", "peers"): ("s2@127.0.0.1:7002",),
        ("cluster", "password"): "cluster-password-0123456789",
        ("auth", "enabled"): True,
    }
    with pytest.raises(ConfigError, match="internal_token"):
        PeerSecurity.from_config(load_config(None, {}, cluster))
    token_file = tmp_path / "token"
    token_file.write_text("internal-token-0123456789\n")
    config = load_config(None, {}, {**cluster, ("auth", "internal_token_file"): str(token_file)})
    peer = PeerSecurity.from_config(config)
    assert peer.credentials is not None
    assert peer.credentials.token == "internal-token-0123456789"
    assert not peer.dialer_tls
    assert PeerSecurity.from_config(load_config(None, {}, {})).credentials is None
