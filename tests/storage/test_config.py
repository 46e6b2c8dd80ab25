from __future__ import annotations

import pytest

from jetserver.storage import LogConfig
from jetserver.storage.config import MAX_SEGMENT_BYTES


def test_defaults() -> None:
    cfg = LogConfig()
    assert cfg.segment_max_bytes == 256 * 1024 * 1024
    assert cfg.segment_max_age_s == 7 * 86400
    assert cfg.index_interval_bytes == 4096
    assert cfg.retention_max_age_s is None
    assert cfg.compact is False
    assert cfg.delete_retention_s == 86400


@pytest.mark.parametrize(
    "kwargs",
    [
        {"segment_max_bytes": 0},
        {"segment_max_bytes": MAX_SEGMENT_BYTES + 1},
        {"segment_max_bytes": 1.5},
        {"segment_max_age_s": 0},
        {"index_interval_bytes": 0},
        {"retention_max_bytes": -1},
        {"retention_max_age_s": -0.1},
        {"retention_max_messages": -5},
        {"delete_retention_s": -1},
        # Upper bounds (issue 31): int(seconds * 1e9) and now_ns - age_ns never overflow.
        {"retention_max_age_s": 1e300},
        {"retention_max_age_s": float("nan")},
        {"segment_max_age_s": float("inf")},
        {"delete_retention_s": float("inf")},
        {"delete_retention_s": float("nan")},
        {"retention_max_bytes": 2**63},
        {"retention_max_messages": 2**63},
    ],
)
def test_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LogConfig(**kwargs)  # type: ignore[arg-type]
