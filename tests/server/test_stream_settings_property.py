"""Property tests over the whole CreateStream settings object (issue 31, item 2).

For random bodies mixing valid and invalid values in every field, the server's validator
(``spec_from_request``) either refuses with INVALID_ARGUMENT naming a key of the body, or
accepts; and then every runtime value derived from the settings is computed without
OverflowError or ValueError, by the code that computes it in the server: the partition
log's config, retention's and compaction's nanosecond arithmetic, the segment-age roll,
the ``Nats-Msg-Id`` window of the sequencer, the replica core, the metadata's JSON and the
Raft op codec. Settings read back from metadata (even garbage an old version or a hand
edit left) are repaired into ones that pass the same checks.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.stream_settings import (
    INT_SETTINGS,
    MAX_DURATION_S,
    SECONDS_SETTINGS,
    SettingError,
    check_settings,
    repair_stored,
)
from jetserver.broker.stream_files import log_config
from jetserver.config.server import ServerConfig
from jetserver.errors import ApiError, ConfigError
from jetserver.metadata.creation import create_stream_op
from jetserver.metadata.model import StreamMeta, StreamSpec
from jetserver.metadata.op_codec import op_from_dict
from jetserver.metadata.validate import spec_from_request
from jetserver.replication import LeaderPolicy
from jetserver.replication.core import ReplicaCore
from jetserver.replication.producers import ProducerTable
from jetserver.storage.clock import wall_ns
from jetserver.storage.retention import segments_to_delete

I64 = 2**63
PROPERTY = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SPECIALS: list[Any] = [
    0,
    -1,
    -0.0,
    1,
    2**31 - 1,
    2**31,
    2**53 + 1,
    I64 - 1,
    I64,
    2**64,
    10**30,
    1e300,
    -1e300,
    1.7976931348623157e308,
    5e-324,
    math.nan,
    math.inf,
    -math.inf,
    MAX_DURATION_S,
    MAX_DURATION_S + 1e-6,
    1.0,
    2.5,
    True,
    False,
    None,
    "1",
    "",
    "flushed",
    "written",
    [],
    [1],
    {},
    {"a": 1},
]


def _boundaries() -> list[Any]:
    out: list[Any] = []
    for low, high in INT_SETTINGS.values():
        out += [low - 1, low, low + 1, high - 1, high, high + 1]
    return out


ANY_VALUE = st.one_of(
    st.sampled_from(SPECIALS + _boundaries()),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0, max_value=2 * MAX_DURATION_S),
    st.sampled_from(["flushed", "replicated", "written", "bogus"]),
)
VALID: dict[str, st.SearchStrategy[Any]] = {
    **{f: st.integers(min_value=lo, max_value=hi) for f, (lo, hi) in INT_SETTINGS.items()},
    **{
        f: st.floats(min_value=0.0 if zero else 1e-9, max_value=MAX_DURATION_S)
        for f, zero in SECONDS_SETTINGS.items()
    },
    "partitions": st.integers(min_value=1, max_value=8),
    "replication_factor": st.integers(min_value=1, max_value=3),
    "min_isr": st.sampled_from([1, 1, 1, 2, 3]),
    "max_message_bytes": st.integers(min_value=1, max_value=1024 * 1024),
    "compact": st.booleans(),
    "internal": st.just(False),
    "durability": st.sampled_from(["flushed", "replicated", "flushed", "written"]),
    "group": st.sampled_from(["g", None]),
}
FIELDS = list(VALID)


def _mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A valid value 7 times in 8, else any value (``one_of`` would flatten the branches
    of ANY_VALUE and draw them as often as the valid one)."""
    return st.integers(min_value=0, max_value=7).flatmap(lambda d: ANY_VALUE if d == 0 else valid)


_BASE = st.fixed_dictionaries(
    {"name": st.just("s"), "subject": st.just("s")},
    optional={
        # Mostly valid values, so that many bodies are accepted and their runtime values
        # computed; any value anywhere, so that every refusal path is taken.
        **{f: _mostly(VALID[f]) for f in FIELDS},
        "op_id": st.just("op-1"),
    },
)


def _with_unknown(args: tuple[dict[str, Any], int, Any]) -> dict[str, Any]:
    body, dice, value = args
    return {**body, "no_such_setting": value} if dice == 0 else body


BODIES = st.tuples(_BASE, st.integers(min_value=0, max_value=19), ANY_VALUE).map(_with_unknown)


def _refusal(body: dict[str, Any]) -> ApiError | StreamSpec:
    try:
        return spec_from_request(body, cluster_size=3)
    except ApiError as exc:
        return exc


def _derived_runtime_values(spec: StreamSpec) -> None:
    """Compute every runtime value the server derives from the settings, the way it
    derives it (each line mirrors the code named in its comment)."""
    now = wall_ns()
    meta = StreamMeta(spec=spec, stream_id="id", created_ns=now, partitions=())
    cfg = log_config(meta, ServerConfig())  # broker/stream_files.py: LogConfig validators
    # storage/retention.py: age_ns and the comparison with now_ns
    segments_to_delete(
        [], config=cfg, log_start_offset=0, log_end_offset=0, high_watermark=0, now_ns=now
    )
    for seconds in (
        cfg.retention_max_age_s,
        cfg.delete_retention_s,  # storage/compaction.py: retention_ns
        cfg.segment_max_age_s,  # storage/log.py: the age roll
        spec.duplicate_window_s,  # broker/append_batch.py: AppendBatch.seen_msg_id's window_ns
    ):
        if seconds is None:
            continue
        ns = int(seconds * 1e9)
        assert now - ns >= -I64  # fits another implementation's i64
        assert now + ns < I64
    rolls = cfg.segment_max_age_s * 1e9 <= 1  # storage/log.py: the age roll's comparison
    assert isinstance(rolls, bool)
    # broker/partition.py: the Nats-Msg-Id lookup with the stream's window
    producers = ProducerTable()
    producers.record_msg_id(b"id", 0, now)
    window_ns = int(
        ReplicaCore(
            me="s1",
            clustered=False,
            policy=LeaderPolicy(durability=spec.durability, min_isr=spec.min_isr),
            duplicate_window_s=spec.duplicate_window_s,
            producers=producers,
        ).duplicate_window_s
        * 1e9
    )
    assert producers.lookup_msg_id(b"id", now, window_ns) == (0, now)
    for limit in (cfg.retention_max_bytes, cfg.retention_max_messages):
        assert limit is None or 1 <= limit < I64
    assert 1024 <= cfg.segment_max_bytes < 2**31
    # metadata: JSON (metadata.json, Raft snapshots) and the CreateStream op round trip
    stored = orjson.loads(orjson.dumps(meta.to_dict()))
    assert StreamSpec.from_dict(stored["spec"]) == spec
    assert repair_stored(stored["spec"])[1] == []  # an accepted spec is never clamped
    op = create_stream_op(spec, ((),) * spec.partitions)
    assert op_from_dict(orjson.loads(orjson.dumps(op.to_dict()))) == op


@PROPERTY
@given(BODIES)
def test_accepted_or_refused_naming_a_field(body: dict[str, Any]) -> None:
    outcome = _refusal(body)
    if isinstance(outcome, StreamSpec):
        event("accepted")
        _derived_runtime_values(outcome)
        check_settings(body)  # what the server accepts, the SDK's check accepts
        return
    assert outcome.code == ErrorCode.INVALID_ARGUMENT
    field = outcome.details["field"]
    event(f"refused: {field}")
    assert field in body, (field, body)
    assert field in str(outcome) or field.replace("_", " ") in str(outcome)  # names it
    server_only = field in (
        "name",
        "subject",
        "group",
        "internal",  # internal needs a '__' name
        "replication_factor",  # above the cluster's size
        "max_message_bytes",  # above the server's limit
    )
    if not server_only:  # the SDK's check (the same function) refuses the same way
        with pytest.raises(SettingError) as sdk:
            check_settings(body)
        assert sdk.value.field == field


@PROPERTY
@given(
    st.fixed_dictionaries(
        {"name": st.just("s"), "subject": st.just("s"), "partitions": st.just(1)},
        optional={f: ANY_VALUE for f in FIELDS if f not in ("partitions", "group", "internal")},
    )
)
def test_stored_settings_are_repaired_into_valid_ones(data: dict[str, Any]) -> None:
    """Metadata holding anything in a setting (an older version's huge value, a hand edit)
    gives a spec whose settings pass today's checks and whose runtime values compute."""
    data.setdefault("replication_factor", 1)
    if (
        not isinstance(data["replication_factor"], int)
        or isinstance(data["replication_factor"], bool)
        or not 1 <= data["replication_factor"] <= 255
    ):
        data["replication_factor"] = 1  # structural: always validated, never repaired
    spec = StreamSpec.from_dict(data)
    settings_only = {
        k: v for k, v in spec.to_dict().items() if k not in ("name", "subject", "group")
    }
    check_settings(settings_only)
    _derived_runtime_values(spec)


@pytest.mark.parametrize("window", [1e300, math.inf, math.nan, -1.0, MAX_DURATION_S * 2])
def test_the_replica_core_refuses_a_window_the_sequencer_cannot_use(window: float) -> None:
    """Defence in depth below the validator: the core that feeds the sequencer's
    ``int(window * 1e9)`` (broker/partition.py) refuses such a window at construction."""
    with pytest.raises(ConfigError, match="duplicate_window_s"):
        ReplicaCore(me="s1", clustered=False, duplicate_window_s=window)
