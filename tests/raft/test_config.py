"""RaftConfig checks: the password is mandatory, members unique, timings consistent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jetserver.errors import ConfigError
from jetserver.raft.config import MIN_PASSWORD_CHARS, RaftConfig, RaftPeer

PASSWORD = "p" * MIN_PASSWORD_CHARS


def config(**kw: Any) -> RaftConfig:
    args: dict[str, Any] = {
        "server_id": "s1",
        "address": "127.0.0.1:7001",
        "peers": (RaftPeer("s2", "127.0.0.1:7002"),),
        "data_dir": Path("/nonexistent"),
        "password": PASSWORD,
    }
    args.update(kw)
    return RaftConfig(**args)


def test_a_valid_config() -> None:
    c = config()
    assert c.server_id_of("127.0.0.1:7002") == "s2"
    assert c.server_id_of("127.0.0.1:7001") == "s1"
    assert c.server_id_of("127.0.0.1:9") is None
    assert c.journal_path.name == "journal.log"
    assert PASSWORD not in repr(c)


@pytest.mark.parametrize("password", ["", "short", "x" * (MIN_PASSWORD_CHARS - 1)])
def test_refuses_to_exist_without_a_real_password(password: str) -> None:
    with pytest.raises(ConfigError, match="password"):
        config(password=password)


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"address": "nohost"}, "host:port"),
        ({"address": "127.0.0.1:0"}, "host:port"),
        ({"bind_address": "x:99999"}, "bind address"),
        ({"server_id": "bad id"}, "server id"),
        ({"peers": (RaftPeer("s1", "127.0.0.1:7002"),)}, "ids must be unique"),
        ({"peers": (RaftPeer("s2", "127.0.0.1:7001"),)}, "addresses must be unique"),
        ({"heartbeat_s": 1.5}, "3 x heartbeat"),
        ({"election_timeout_max_s": 0.3}, "max_s must exceed"),
        ({"connection_timeout_s": 0.5}, "connection_timeout_s"),
        ({"leader_fallback_s": 0.01}, "leader_fallback_s"),
        ({"compaction_min_entries": 1}, "compaction_min_entries"),
        ({"tick_s": 0}, "tick_s must be > 0"),
    ],
)
def test_bad_values(kw: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        config(**kw)


def test_bad_peer() -> None:
    with pytest.raises(ConfigError, match="peer"):
        RaftPeer("s2", "localhost")
