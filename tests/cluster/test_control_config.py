"""The [cluster] configuration: parsing, the mandatory password, the Raft configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetserver.cli.server_cmd import config_from_args
from jetserver.cluster.bootstrap import raft_config
from jetserver.config.load import load_config, to_toml
from jetserver.errors import ConfigError
from jetserver.raft import RaftPeer
from support.jet_server import server_args

PASSWORD = "a-cluster-password-0123456789"


def test_no_cluster_by_default() -> None:
    cfg = load_config()
    assert not cfg.cluster.enabled
    with pytest.raises(ConfigError, match="clustering is off"):
        raft_config(cfg)


def test_cluster_from_a_file_and_the_password_from_the_environment(tmp_path: Path) -> None:
    conf = tmp_path / "jet.toml"
    conf.write_text(
        '[server]\nid = "s2"\ndata_dir = "/var/jet"\n'
        '[cluster]\nraft_address = "10.0.0.2:7000"\n'
        'peers = ["s1@10.0.0.1:7000", "s3@10.0.0.3:7000"]\n'
    )
    cfg = load_config(conf, {"JET_CLUSTER_PASSWORD": PASSWORD})
    assert cfg.cluster.enabled
    assert cfg.cluster.peer_list() == [("s1", "10.0.0.1:7000"), ("s3", "10.0.0.3:7000")]
    raft = raft_config(cfg)
    assert raft.server_id == "s2"
    assert raft.address == "10.0.0.2:7000"
    assert raft.peers == (RaftPeer("s1", "10.0.0.1:7000"), RaftPeer("s3", "10.0.0.3:7000"))
    assert raft.password == PASSWORD
    assert raft.data_dir == Path("/var/jet/raft")
    # Timing for a loaded machine: 1-2 s election timeout, the leader steps down as late.
    assert (raft.election_timeout_min_s, raft.election_timeout_max_s) == (3.0, 4.5)
    assert raft.leader_fallback_s == raft.connection_timeout_s == 4.5
    assert raft.tick_s == 0.02
    assert "***" in to_toml(cfg)
    assert PASSWORD not in to_toml(cfg)
    assert PASSWORD not in repr(cfg)


def test_cluster_from_flags_and_a_password_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(PASSWORD + "\n")
    args = server_args(
        "--server-id",
        "s1",
        "--raft-address",
        "127.0.0.1:7001",
        "--peers",
        "s2@127.0.0.1:7002,s3@127.0.0.1:7003",
        "--cluster-password-file",
        str(secret),
        "--join",
    )
    cfg = config_from_args(args, {})
    raft = raft_config(cfg)
    assert raft.password == PASSWORD
    assert raft.join
    assert [p.server_id for p in raft.peers] == ["s2", "s3"]


def test_a_cluster_without_a_password_is_refused() -> None:
    with pytest.raises(ConfigError, match="a cluster needs a password"):
        load_config(None, {}, {("cluster", "raft_address"): "127.0.0.1:7001"})


def test_a_short_password_is_refused() -> None:
    with pytest.raises(ConfigError, match="at least 16 characters"):
        load_config(
            None,
            {"JET_CLUSTER_PASSWORD": "short"},
            {("cluster", "raft_address"): "127.0.0.1:7001"},
        )


def test_an_unreadable_password_file_is_refused(tmp_path: Path) -> None:
    cfg = load_config(
        None,
        {},
        {
            ("cluster", "raft_address"): "127.0.0.1:7001",
            ("cluster", "password_file"): str(tmp_path / "missing"),
        },
    )
    with pytest.raises(ConfigError, match=r"cannot read cluster\.password_file"):
        raft_config(cfg)


@pytest.mark.parametrize(
    ("peers", "fragment"),
    [
        ("127.0.0.1:7002", "id@host:port"),
        ("s2@127.0.0.1", "id@host:port"),
        ("s2@127.0.0.1:0", "id@host:port"),
        ("s 2@127.0.0.1:7002", "id@host:port"),
        ("s2@127.0.0.1:7002,s2@127.0.0.1:7003", "unique"),
        ("s1@127.0.0.1:7002", "also listed"),
    ],
)
def test_bad_peer_lists_are_refused(peers: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        load_config(
            None,
            {"JET_CLUSTER_PASSWORD": PASSWORD, "JET_CLUSTER_PEERS": peers},
            {("cluster", "raft_address"): "127.0.0.1:7001"},
        )


def test_the_raft_tick_is_a_cluster_option(tmp_path: Path) -> None:
    conf = tmp_path / "jet.toml"
    conf.write_text(
        '[server]\nid = "s1"\n[cluster]\nraft_address = "127.0.0.1:7001"\nraft_tick_s = 0.1\n'
    )
    assert raft_config(load_config(conf, {"JET_CLUSTER_PASSWORD": PASSWORD})).tick_s == 0.1
    conf.write_text('[server]\nid = "s1"\n[cluster]\nraft_tick_s = 0\n')
    with pytest.raises(ConfigError, match="raft_tick_s"):
        load_config(conf, {})
