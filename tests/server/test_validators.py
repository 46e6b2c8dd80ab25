"""The one set of configuration validators (jetserver/config/validators.py)."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

from jetserver.config.validators import non_negative, optional_non_negative, positive, positive_int
from jetserver.errors import ConfigError
from jetserver.raft.config import RaftConfig, RaftPeer
from jetserver.replication.config import ReplicationConfig
from jetserver.storage.config import LogConfig


@attrs.frozen
class _Settings:
    rate: float = attrs.field(default=1.0, validator=positive("demo"))
    floor: float = attrs.field(default=0.0, validator=non_negative())
    cap: float | None = attrs.field(default=None, validator=optional_non_negative())
    count: int = attrs.field(default=1, validator=positive_int(10))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 0}, "demo.rate must be > 0, got 0"),
        ({"rate": True}, "demo.rate must be > 0, got True"),
        ({"rate": "1"}, "demo.rate must be > 0"),
        ({"floor": -0.5}, "floor must be >= 0, got -0.5"),
        ({"cap": -1}, "cap must be >= 0"),
        ({"count": 11}, "count must be an int in [1, 10], got 11"),
        ({"count": 2.0}, "count must be an int in [1, 10]"),
    ],
)
def test_bad_values_raise_config_error_naming_the_setting(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        _Settings(**kwargs)  # type: ignore[arg-type]


def test_good_values_pass() -> None:
    assert _Settings(rate=0.1, floor=0, cap=0, count=10).count == 10


def test_every_config_class_raises_config_error_which_is_a_value_error() -> None:
    with pytest.raises(ConfigError, match=re.escape("replication.leader_silence_s must be > 0")):
        ReplicationConfig(leader_silence_s=0)
    with pytest.raises(ValueError, match="segment_max_bytes must be an int"):
        LogConfig(segment_max_bytes=0)
    with pytest.raises(ConfigError, match=re.escape("raft.tick_s must be > 0")):
        RaftConfig(
            server_id="s1",
            address="127.0.0.1:7001",
            peers=(RaftPeer("s2", "127.0.0.1:7002"),),
            data_dir=Path("/nonexistent"),
            password="a-long-enough-cluster-password",
            tick_s=0,
        )
