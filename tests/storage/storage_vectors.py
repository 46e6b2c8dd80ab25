"""Generate spec/vectors/storage.json: byte-exact vectors of the storage formats.

Usage (from the repository root)::

    python tests/storage/storage_vectors.py           # (re)write spec/vectors/storage.json
    python tests/storage/storage_vectors.py --check   # exit 1 if the committed file differs

The expected bytes are built here from the spec's layouts with ``struct`` and the record
codec's ``frame_body``, independently of ``jetserver.storage``; test_vectors.py then checks
that the storage engine writes exactly these bytes. Deterministic: no clock, no randomness.

Case types (``cases``):

* ``segment_file_name``: fields ``base_offset``, ``suffix``; ``hex`` = the ASCII file name.
* ``offset_index_entry``: fields ``relative_offset``, ``position``; ``hex`` = 8 bytes.
* ``time_index_entry``: fields ``timestamp``, ``relative_offset``; ``hex`` = 12 bytes.
* ``checkpoint``: fields ``file``, ``entries`` (lists of integers); ``hex`` = file bytes.
* ``segment``: fields ``config`` (LogConfig values), ``appends`` (``timestamp``,
  ``leader_epoch``, ``bodies_hex``: the record bodies of one ``Log.append`` call); ``files``
  maps every segment file name to its hex contents after ``Log.close``.

``invalid`` cases (type ``checkpoint``, ``offset_index`` or ``time_index``) must be refused.
"""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path
from typing import Any

import orjson

from jetsdk.codec.record import HEADER_SIZE, encode_body, frame_body

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "spec" / "vectors" / "storage.json"
T0 = 1_700_000_000_000_000_000


def name_case(base: int, suffix: str) -> dict[str, Any]:
    name = "%020d%s" % (base, suffix)  # noqa: UP031 - the spec's printf-style rule
    return {
        "name": f"name_{base}{suffix}",
        "type": "segment_file_name",
        "fields": {"base_offset": base, "suffix": suffix, "file_name": name},
        "hex": name.encode("ascii").hex(),
    }


def index_case(rel: int, pos: int) -> dict[str, Any]:
    return {
        "name": f"index_{rel}_{pos}",
        "type": "offset_index_entry",
        "fields": {"relative_offset": rel, "position": pos},
        "hex": struct.pack(">II", rel, pos).hex(),
    }


def time_case(ts: int, rel: int) -> dict[str, Any]:
    return {
        "name": f"timeindex_{rel}",
        "type": "time_index_entry",
        "fields": {"timestamp": ts, "relative_offset": rel},
        "hex": struct.pack(">qI", ts, rel).hex(),
    }


def checkpoint_case(name: str, file: str, entries: list[list[int]]) -> dict[str, Any]:
    text = f"0\n{len(entries)}\n" + "".join(" ".join(map(str, e)) + "\n" for e in entries)
    return {
        "name": name,
        "type": "checkpoint",
        "fields": {"file": file, "entries": entries},
        "hex": text.encode("ascii").hex(),
    }


def segment_case(
    name: str, config: dict[str, int], appends: list[tuple[int, int, list[bytes]]]
) -> dict[str, Any]:
    """Expected files, by the spec's rules (roll before a batch that would overfill)."""
    max_bytes = config["segment_max_bytes"]
    interval = config["index_interval_bytes"]
    segments: list[dict[str, Any]] = []
    offset = 0
    for ts, epoch, bodies in appends:
        batch = b"".join(frame_body(offset + i, ts, epoch, b) for i, b in enumerate(bodies))
        if not segments or (
            segments[-1]["log"] and len(segments[-1]["log"]) + len(batch) > max_bytes
        ):
            segments.append(
                {"base": offset, "log": b"", "index": b"", "time": b"", "last": 0, "max": None}
            )
        seg = segments[-1]
        for i, body in enumerate(bodies):
            pos = len(seg["log"])
            seg["max"] = ts if seg["max"] is None else max(seg["max"], ts)
            if pos - seg["last"] >= interval:
                rel = offset + i - seg["base"]
                seg["index"] += struct.pack(">II", rel, pos)
                seg["time"] += struct.pack(">qI", seg["max"], rel)
                seg["last"] = pos
            seg["log"] += frame_body(offset + i, ts, epoch, body)
            assert len(frame_body(offset + i, ts, epoch, body)) == HEADER_SIZE + len(body)
        offset += len(bodies)
    files = {}
    for seg in segments:
        stem = "%020d" % seg["base"]  # noqa: UP031
        files[stem + ".log"] = seg["log"].hex()
        files[stem + ".index"] = seg["index"].hex()
        files[stem + ".timeindex"] = seg["time"].hex()
    return {
        "name": name,
        "type": "segment",
        "fields": {
            "config": config,
            "appends": [
                {"timestamp": ts, "leader_epoch": epoch, "bodies_hex": [b.hex() for b in bodies]}
                for ts, epoch, bodies in appends
            ],
        },
        "files": files,
    }


def build() -> dict[str, Any]:
    bodies = [
        encode_body(b"v%d" % i, key=None if i % 3 == 0 else b"key-%d" % (i % 4), subject="orders")
        for i in range(12)
    ]
    cases: list[dict[str, Any]] = [
        name_case(0, ".log"),
        name_case(0, ".index"),
        name_case(0, ".timeindex"),
        name_case(1234567, ".log"),
        name_case(2**63 - 1, ".log"),
        index_case(0, 0),
        index_case(1, 4096),
        index_case(4294967295, 4294967295),
        time_case(T0, 1),
        time_case(-1, 0),
        time_case(2**63 - 1, 4294967295),
        checkpoint_case("high_watermark", "high-watermark-checkpoint", [[42]]),
        checkpoint_case("high_watermark_zero", "high-watermark-checkpoint", [[0]]),
        checkpoint_case("log_start_offset", "log-start-offset-checkpoint", [[9223372036854775807]]),
        checkpoint_case("leader_epochs", "leader-epoch-checkpoint", [[0, 0], [3, 120], [7, 4096]]),
        checkpoint_case("leader_epochs_empty", "leader-epoch-checkpoint", []),
        checkpoint_case("clean_shutdown", "clean-shutdown", [[100, 2048]]),
        segment_case(
            "one_segment",
            {"segment_max_bytes": 1 << 20, "index_interval_bytes": 64},
            [(T0, 0, bodies[:5]), (T0 + 1000, 1, bodies[5:12])],
        ),
        segment_case(
            "rolled",
            {"segment_max_bytes": 300, "index_interval_bytes": 100},
            [(T0, 0, bodies[:4]), (T0 + 1, 0, bodies[4:6]), (T0 + 2, 2, bodies[6:12])],
        ),
    ]
    invalid = [
        {"name": n, "type": "checkpoint", "hex": h.hex(), "error_reason": "corrupt"}
        for n, h in [
            ("no_final_newline", b"0\n1\n42"),
            ("unknown_version", b"1\n1\n42\n"),
            ("count_mismatch", b"0\n2\n42\n"),
            ("leading_zero", b"0\n1\n042\n"),
            ("negative", b"0\n1\n-1\n"),
            ("crlf", b"0\r\n1\r\n42\r\n"),
            ("extra_space", b"0\n1\n42 \n"),
        ]
    ]
    invalid += [
        {
            "name": "index_not_multiple_of_8",
            "type": "offset_index",
            "hex": "00000001000000",
            "error_reason": "corrupt",
        },
        {
            "name": "index_not_increasing",
            "type": "offset_index",
            "hex": struct.pack(">IIII", 5, 100, 5, 200).hex(),
            "error_reason": "corrupt",
        },
        {
            "name": "timeindex_going_back",
            "type": "time_index",
            "hex": struct.pack(">qIqI", 10, 1, 9, 2).hex(),
            "error_reason": "corrupt",
        },
    ]
    return {
        "format": "storage",
        "doc": "spec/storage.md (Files, Offset index, Time index, Checkpoint files). "
        "Integers exact; byte strings lowercase hex.",
        "cases": cases,
        "invalid": invalid,
    }


def render() -> bytes:
    return orjson.dumps(build(), option=orjson.OPT_INDENT_2) + b"\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    data = render()
    if args.check:
        same = OUT.exists() and OUT.read_bytes() == data
        print("storage.json is up to date" if same else "storage.json differs")
        return 0 if same else 1
    OUT.write_bytes(data)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
