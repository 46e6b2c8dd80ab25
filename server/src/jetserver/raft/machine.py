"""The state machine applied under Raft: metadata ops with ids, pure and idempotent on replay.

A Raft log entry is one :class:`Entry`, encoded as orjson bytes: the metadata operation
(:mod:`jetserver.metadata.ops`) plus an ``op_id`` chosen by the proposer. :func:`apply_entry`
applies an encoded entry to a :class:`MachineState` and returns the next state and an
:class:`EntryOutcome`; it reads no clock, no randomness and no files, so every server that
applies the same entries from the same state reaches the same state and the same results.

Idempotency: the last :data:`MAX_REMEMBERED_OPS` op ids are remembered with their log
position and result. An entry whose ``op_id`` is remembered is not applied again; its
outcome is the remembered one (``duplicate=True``). A proposer that does not know whether
its proposal was applied (timeout, leader change) retries with the same ``op_id`` and gets
the original result exactly once. An entry that cannot be decoded (a newer server's op kind)
consumes its log position and yields an INVALID_ARGUMENT result on every server alike; an
operation that makes ``apply`` raise (a bug) yields an UNKNOWN error result, alike too,
instead of stopping the log.

Snapshots: :func:`machine_to_dict` / :func:`machine_from_dict` (JSON-friendly, orjson), used
by the Raft host for PySyncObj's full dump; never pickle.

Thread safety: everything here is pure; values are frozen and never mutated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import orjson

from jetsdk.codec.error_codes import ErrorCode
from jetserver.errors import JetServerError
from jetserver.metadata.model import MetadataState, StreamMeta
from jetserver.metadata.op_codec import op_from_dict
from jetserver.metadata.ops import CreateStream, DeleteStream, Op, OpResult, apply
from jetserver.raft.errors import EntryTooLarge

MAX_REMEMBERED_OPS = 1024
"""Op ids remembered for de-duplication (oldest forgotten first)."""
MAX_OP_ID_CHARS = 128
"""Longest accepted op id."""
MAX_ENTRY_BYTES = 1024 * 1024
"""Largest encoded entry (the Raft host keeps every entry in one append message)."""
SNAPSHOT_FORMAT = 1
"""Version of :func:`machine_to_dict`'s layout."""
UNDECODABLE = "undecodable metadata entry"
"""Start of the result message of an entry that could not be decoded."""


class EntryDecodeError(JetServerError, ValueError):
    """Bytes that are not an encoded :class:`Entry`."""


@attrs.frozen
class Entry:
    """One Raft log entry: a metadata operation and the id that makes it idempotent."""

    op_id: str
    """Proposer-chosen unique id (1-128 characters); a re-proposal reuses it."""
    op: Op
    """The metadata operation."""


def encode_entry(entry: Entry) -> bytes:
    """The entry as orjson bytes (what the Raft log stores).

    Raises:
        ValueError: the op id is empty or longer than :data:`MAX_OP_ID_CHARS`.
        EntryTooLarge: the encoded entry is over :data:`MAX_ENTRY_BYTES`.
    """
    _check_op_id(entry.op_id)
    data = orjson.dumps({"op_id": entry.op_id, "op": entry.op.to_dict()})
    if len(data) > MAX_ENTRY_BYTES:
        raise EntryTooLarge(f"metadata entry is {len(data)} bytes; the limit is {MAX_ENTRY_BYTES}")
    return data


def decode_entry(data: bytes) -> Entry:
    """Inverse of :func:`encode_entry`.

    Raises:
        EntryDecodeError: not JSON, not an object, a bad op id, or an unknown/invalid op.
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EntryDecodeError(f"entry is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise EntryDecodeError("entry is not a JSON object")
    op_id = obj.get("op_id")
    op = obj.get("op")
    if not isinstance(op_id, str) or not isinstance(op, dict):
        raise EntryDecodeError("entry needs a string op_id and an op object")
    try:
        _check_op_id(op_id)
        return Entry(op_id=op_id, op=op_from_dict(op))
    except (KeyError, TypeError, ValueError) as exc:
        raise EntryDecodeError(f"invalid entry {op_id!r}: {exc}") from exc


def _check_op_id(op_id: str) -> None:
    if not op_id or len(op_id) > MAX_OP_ID_CHARS:
        raise ValueError(f"op id must be 1-{MAX_OP_ID_CHARS} characters, got {len(op_id)}")


@attrs.frozen
class RememberedOp:
    """An applied op id, kept to answer re-proposals."""

    index: int
    """The state-machine index it was applied at."""
    result: OpResult
    """Its result."""


@attrs.frozen
class EntryOutcome:
    """What applying one entry did."""

    index: int
    """State-machine index of the operation (for a duplicate: where it was first applied)."""
    result: OpResult
    """The operation's result (for a duplicate: the original result)."""
    duplicate: bool = False
    """True if the op id had been applied before and nothing changed."""


@attrs.frozen
class MachineState:
    """The replicated state: the metadata and the remembered op ids."""

    metadata: MetadataState = attrs.field(factory=MetadataState)
    """Streams and assignments; ``metadata.applied`` is the state-machine index."""
    recent: Mapping[str, RememberedOp] = attrs.field(factory=dict)
    """Remembered op ids, oldest first (insertion order is part of the state)."""

    @property
    def index(self) -> int:
        """Entries applied so far (every entry counts, duplicates and bad ones included)."""
        return self.metadata.applied


def apply_entry(state: MachineState, data: bytes) -> tuple[MachineState, EntryOutcome]:
    """Apply one encoded entry; return the next state and the outcome. Pure, deterministic."""
    index = state.metadata.applied + 1
    try:
        entry = decode_entry(data)
    except EntryDecodeError as exc:
        bumped = attrs.evolve(state.metadata, applied=index)
        result = OpResult(ErrorCode.INVALID_ARGUMENT, f"{UNDECODABLE}: {exc}")
        return attrs.evolve(state, metadata=bumped), EntryOutcome(index, result)
    seen = state.recent.get(entry.op_id)
    if seen is not None:
        bumped = attrs.evolve(state.metadata, applied=index)
        outcome = EntryOutcome(seen.index, seen.result, duplicate=True)
        return attrs.evolve(state, metadata=bumped), outcome
    try:
        metadata, result = apply(state.metadata, entry.op)
    except Exception as exc:  # a bug in apply: fail the op alike everywhere, keep going
        metadata = attrs.evolve(state.metadata, applied=index)
        # Only the type: a message may hold addresses that differ between servers.
        result = OpResult(ErrorCode.UNKNOWN, f"metadata op failed ({type(exc).__name__})")
    recent = dict(state.recent)
    recent[entry.op_id] = RememberedOp(index, remembered_result(entry.op, result))
    while len(recent) > MAX_REMEMBERED_OPS:
        del recent[next(iter(recent))]
    return MachineState(metadata=metadata, recent=recent), EntryOutcome(index, result)


def remembered_result(op: Op, result: OpResult) -> OpResult:
    """The result remembered for re-proposals of ``op``'s id: CreateStream and DeleteStream
    keep their stream (a retried create answers with it); every other op drops it (and each
    of ``results``' streams). Their proposers read only the codes and messages, and a whole
    stream per remembered ISR change or election made the snapshot of 1,024 remembered ops
    tens of MB at thousands of partitions: serializing it in the Raft thread starved the
    heartbeats and the metadata leader changed every few seconds."""
    if isinstance(op, CreateStream | DeleteStream):
        return result
    if result.stream is None and not result.results:
        return result
    # Of each batched change only its code: the snapshot writes them as a list of ints
    # (1,024 remembered batches of up to 1,000 changes, with a message each, were 6.7 MB
    # of an 8 MB snapshot at 5,200 partitions).
    results = tuple(OpResult(r.error_code) for r in result.results)
    return attrs.evolve(result, stream=None, results=results)


def result_to_dict(result: OpResult) -> dict[str, Any]:
    """An :class:`OpResult` as a JSON object (``results`` only when there are some; as
    ``codes``, a list of error codes, when each holds nothing but its code)."""
    out: dict[str, Any] = {
        "error_code": int(result.error_code),
        "message": result.message,
        "created": result.created,
        "stream": None if result.stream is None else result.stream.to_dict(),
    }
    if result.results:
        if all(_code_only(r) for r in result.results):
            out["codes"] = [int(r.error_code) for r in result.results]  # codes alone: compact
        else:
            out["results"] = [result_to_dict(r) for r in result.results]
    return out


def _code_only(result: OpResult) -> bool:
    """``result == OpResult(result.error_code)``, without building one (a remembered batch
    holds up to thousands of results, and every snapshot looked at each)."""
    return (
        not result.message and not result.created and result.stream is None and not result.results
    )


def result_from_dict(data: Mapping[str, Any]) -> OpResult:
    """Inverse of :func:`result_to_dict`."""
    stream = data.get("stream")
    return OpResult(
        error_code=ErrorCode(int(data["error_code"])),
        message=str(data.get("message", "")),
        created=bool(data.get("created", False)),
        stream=None if stream is None else StreamMeta.from_dict(stream),
        results=tuple(result_from_dict(r) for r in data.get("results", ()))
        + tuple(OpResult(ErrorCode(int(c))) for c in data.get("codes", ())),
    )


def machine_to_dict(
    state: MachineState,
    *,
    stream: Callable[[StreamMeta], Any] = StreamMeta.to_dict,
    result: Callable[[RememberedOp], Any] = lambda seen: result_to_dict(seen.result),
) -> dict[str, Any]:
    """The whole state as a JSON object (the snapshot content); ``stream`` and ``result``
    encode each stream and each remembered op's result (the Raft host passes encodings it
    kept from the last snapshot: :mod:`jetserver.raft.snapshot_pieces`)."""
    return {
        "format": SNAPSHOT_FORMAT,
        "metadata": state.metadata.to_dict(stream=stream),
        "recent": [[op_id, seen.index, result(seen)] for op_id, seen in state.recent.items()],
    }


def machine_from_dict(data: Mapping[str, Any]) -> MachineState:
    """Inverse of :func:`machine_to_dict`.

    Raises:
        ValueError: an unknown format or a malformed document (KeyError/TypeError mapped).
    """
    if data.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"unknown metadata snapshot format {data.get('format')!r}")
    try:
        recent = {
            str(op_id): RememberedOp(int(index), result_from_dict(result))
            for op_id, index, result in data["recent"]
        }
        return MachineState(metadata=MetadataState.from_dict(data["metadata"]), recent=recent)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed metadata snapshot: {exc}") from exc
