"""`jet stream create` with settings beyond their limits (issue 31, case 3): refused at
once, exit 2, the setting named; nothing created."""

from __future__ import annotations

import time

import orjson

from support.jet_cli import jet, ok
from support.jet_dev import JetDev

REFUSAL_BOUND_S = 20.0  # a `jet` subprocess: interpreter start, connect, one request


def test_out_of_range_settings_exit_2_naming_the_setting(jet_dev: JetDev) -> None:
    for flag, value, field in [
        ("--segment-max-bytes", "1TiB", "segment_max_bytes"),  # 2^40: was STORAGE_ERROR, 9 s
        ("--segment-max-bytes", "100", "segment_max_bytes"),
        ("--duplicate-window", "99999999999d", "duplicate_window_s"),
        ("--retention-max-age", "9" * 400, "retention_max_age_s"),  # float("9"*400): inf
        ("--retention-max-bytes", str(2**63), "retention_max_bytes"),
    ]:
        started = time.monotonic()
        proc = jet(jet_dev, "stream", "create", "cli-settings", flag, value)
        took = time.monotonic() - started
        assert proc.returncode == 2, (flag, value, proc.stderr)
        assert field in proc.stderr, (flag, value, proc.stderr)
        assert "STORAGE_ERROR" not in proc.stderr
        assert took < REFUSAL_BOUND_S
    assert jet(jet_dev, "stream", "info", "cli-settings").returncode == 1  # never created
    created = ok(
        jet(
            jet_dev,
            *("stream", "create", "cli-settings", "--json"),
            *("--segment-max-bytes", str(2**31 - 1), "--duplicate-window", "5m"),
            # create takes every setting `jet stream edit` changes (one table), "none" too
            *("--delete-retention", "2h", "--retention-max-bytes", "none"),
        )
    )
    config = orjson.loads(created)["config"]
    assert config["segment_max_bytes"] == 2**31 - 1
    assert config["duplicate_window_s"] == 300
    assert config["delete_retention_s"] == 7200
    assert config["retention_max_bytes"] is None
