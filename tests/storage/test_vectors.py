"""The bytes the storage engine writes match spec/vectors/storage.json and record.json."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jetsdk.codec.record import encode_body
from jetserver.storage import CorruptFileError, Log, LogConfig
from jetserver.storage.checkpoint import (
    LOG_START_OFFSET_FILE,
    format_checkpoint,
    parse_checkpoint,
    write_checkpoint,
)
from jetserver.storage.files import parse_segment_file_name, segment_file_name
from jetserver.storage.offset_index import OffsetIndex
from jetserver.storage.offset_index import encode_entry as index_entry
from jetserver.storage.time_index import TimeIndex
from jetserver.storage.time_index import encode_entry as time_entry
from support.vectors import VECTORS, load_vectors

from . import storage_vectors


def cases(kind: str) -> list[dict[str, Any]]:
    return [c for c in load_vectors("storage.json")["cases"] if c["type"] == kind]


def test_storage_json_is_generated() -> None:
    assert (VECTORS / "storage.json").read_bytes() == storage_vectors.render(), (
        "run: python tests/storage/storage_vectors.py"
    )


@pytest.mark.parametrize("case", cases("segment_file_name"), ids=lambda c: c["name"])
def test_segment_file_names(case: dict[str, Any]) -> None:
    f = case["fields"]
    name = bytes.fromhex(case["hex"]).decode("ascii")
    assert segment_file_name(f["base_offset"], f["suffix"]) == name == f["file_name"]
    assert parse_segment_file_name(name) == (f["base_offset"], f["suffix"])


@pytest.mark.parametrize("case", cases("offset_index_entry"), ids=lambda c: c["name"])
def test_offset_index_entries(case: dict[str, Any]) -> None:
    f = case["fields"]
    assert index_entry(f["relative_offset"], f["position"]).hex() == case["hex"]


@pytest.mark.parametrize("case", cases("time_index_entry"), ids=lambda c: c["name"])
def test_time_index_entries(case: dict[str, Any]) -> None:
    f = case["fields"]
    assert time_entry(f["timestamp"], f["relative_offset"]).hex() == case["hex"]
    parsed = TimeIndex.from_bytes(bytes.fromhex(case["hex"]))
    assert (parsed.timestamps[0], parsed.relative_offsets[0]) == (
        f["timestamp"],
        f["relative_offset"],
    )


@pytest.mark.parametrize("case", cases("checkpoint"), ids=lambda c: c["name"])
def test_checkpoints(case: dict[str, Any], tmp_path: Path) -> None:
    f = case["fields"]
    entries = [tuple(e) for e in f["entries"]]
    raw = bytes.fromhex(case["hex"])
    assert format_checkpoint(entries) == raw
    fields = len(entries[0]) if entries else 2
    assert parse_checkpoint(raw, fields) == entries
    write_checkpoint(tmp_path, f["file"], entries)
    assert (tmp_path / f["file"]).read_bytes() == raw


@pytest.mark.parametrize("case", cases("segment"), ids=lambda c: c["name"])
def test_segment_files(case: dict[str, Any], tmp_path: Path) -> None:
    f = case["fields"]
    config = LogConfig(**f["config"])
    with Log.open(tmp_path, config) as log:
        for append in f["appends"]:
            bodies = [bytes.fromhex(b) for b in append["bodies_hex"]]
            log.append(bodies, append["timestamp"], append["leader_epoch"])
    written = {
        p.name: p.read_bytes().hex()
        for p in tmp_path.iterdir()
        if parse_segment_file_name(p.name) is not None
    }
    assert written == case["files"]
    with Log.open(tmp_path, config) as log:  # and they read back as a valid log
        assert log.recovery.ok
        assert log.recovery.indexes_rebuilt == 0


@pytest.mark.parametrize("case", load_vectors("storage.json")["invalid"], ids=lambda c: c["name"])
def test_invalid_inputs_are_refused(case: dict[str, Any]) -> None:
    raw = bytes.fromhex(case["hex"])
    parsers: dict[str, Callable[[], object]] = {
        "checkpoint": lambda: parse_checkpoint(raw, 1),
        "offset_index": lambda: OffsetIndex.from_bytes(raw),
        "time_index": lambda: TimeIndex.from_bytes(raw),
    }
    with pytest.raises(CorruptFileError):
        parsers[case["type"]]()


def record_cases() -> list[dict[str, Any]]:
    path = VECTORS / "record.json"
    if not path.exists():  # pragma: no cover - written by the codec helper
        return []
    return [c for c in load_vectors("record.json")["cases"] if c["type"] == "record"]


@pytest.mark.skipif(not (VECTORS / "record.json").exists(), reason="record.json not written yet")
@pytest.mark.parametrize("case", record_cases(), ids=lambda c: c["name"])
def test_record_vectors_are_stored_verbatim(case: dict[str, Any], tmp_path: Path) -> None:
    f = case["fields"]
    body = encode_body(
        bytes.fromhex(f["value_hex"]),
        key=None if f["key_hex"] is None else bytes.fromhex(f["key_hex"]),
        subject=f["subject"],
        reply=f["reply"],
        headers=[(name, bytes.fromhex(value)) for name, value in f["headers"]],
        producer_id=f["producer_id"],
        producer_seq=f["producer_seq"],
    )
    # Start an empty log at the vector's offset (a log start checkpoint with no segments).
    (tmp_path / "append").mkdir()
    write_checkpoint(tmp_path / "append", LOG_START_OFFSET_FILE, [(f["offset"],)])
    with Log.open(tmp_path / "append") as log:
        assert log.append([body], f["timestamp"], f["leader_epoch"]) == (
            f["offset"],
            f["timestamp"],
        )
        log.set_high_watermark(log.log_end_offset)
        with log.read(f["offset"], 1 << 20) as sl:
            assert sl.read_bytes().hex() == case["hex"]
    log_file = tmp_path / "append" / segment_file_name(f["offset"], ".log")
    assert log_file.read_bytes().hex() == case["hex"]
    # And replication stores the same bytes unchanged.
    (tmp_path / "raw").mkdir()
    write_checkpoint(tmp_path / "raw", LOG_START_OFFSET_FILE, [(f["offset"],)])
    with Log.open(tmp_path / "raw") as log:
        assert log.append_raw(bytes.fromhex(case["hex"])) == f["offset"] + 1
    raw_file = tmp_path / "raw" / segment_file_name(f["offset"], ".log")
    assert raw_file.read_bytes().hex() == case["hex"]
