"""The routes of ``jet console``: static pages and JSON endpoints over a :class:`Client`.

A background task samples the cluster every second (:class:`ClusterSampler`) and keeps the
last snapshot and a :class:`History` of rates and lags; the page endpoints answer from them.
Browsing records asks the partition's leader through the client at request time.

GET endpoints (all JSON)::

    /api/config                      {"allow_writes", "servers", "sampled_at", "error"}
    /api/cluster                     servers (up/down), metadata leader
    /api/streams                     streams: config (retention), partitions (leader, ISR,
                                     HW, LEO, log start, size, replica lag, rates)
    /api/groups                      groups: members, assignment, committed offsets, lag
    /api/history                     per-stream in/out msg/s and per-group lag over time
    /api/records?stream=S&partition=P[&offset=N|&time=ISO-or-ms][&limit=L]
        [&key=K][&header=NAME or NAME=VALUE]  (search: records matching, scanned from the
        offset or time given, else from the log start, at most SEARCH_MAX_SCAN per request)
    POST /api/records            (--allow-writes: produce one message, console/produce.py)
    /api/tables/STREAM?[prefix=P][&after=CURSOR][&limit=L]
        a compacted stream's latest value per key, in key order (console/tables.py)

Writes (only with ``--allow-writes``, and a request header ``X-Jet-Console: 1``, which a
page of another origin cannot send without the browser asking first; the servers still
check the console's credentials, so with auth on they need the ``admin`` grant)::

    POST   /api/streams              {"name", "subject"?, "partitions"?, "replication_factor"?,
                                      "retention_max_age"?, "retention_max_bytes"?,
                                      "retention_max_messages"?}
    DELETE /api/streams/NAME
    POST   /api/streams/NAME/settings, /api/streams/NAME/purge  (console/stream_edit.py)
    POST   /api/groups/NAME/reset    {"stream", "to": "earliest"|"latest"|OFFSET,
                                      "partitions"?: [P, ...]}
"""

from __future__ import annotations

import base64
import importlib.resources
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

import anyio
import attrs

from jetsdk import (
    Client,
    CommitFailed,
    InvalidArgument,
    JetError,
    OffsetOutOfRange,
    PermissionDenied,
    StreamExists,
    StreamNotFound,
    StreamPartition,
)
from jetsdk.codec.record import Record, iter_records
from jetsdk.consumer.group_admin import commit_offsets, group_offsets
from jetsdk.metadata import partition_subject
from jetserver.console.http import HttpError, Request, Response
from jetserver.console.produce import produce_record
from jetserver.console.stream_edit import purge_stream, update_stream
from jetserver.console.tables import TableBrowser
from jetserver.observe.sampler import ClusterSampler, History, Snapshot

SAMPLE_INTERVAL_S = 1.0
FIRST_SAMPLE_WAIT_S = 15.0
MAX_RECORDS = 500
_FETCH_BYTES = 1024 * 1024
_MAX_FETCHES = 100
SEARCH_MAX_SCAN = 100_000
"""Records one search request reads at most (its answer's ``next`` continues it)."""


def record_filter(query: dict[str, str]) -> Callable[[Record], bool] | None:
    """The search of ``key`` (the key as UTF-8 text, exactly) and ``header`` (``NAME``: has
    the header; ``NAME=VALUE``: with that value as UTF-8 text), or None without one."""
    key = query.get("key") or None
    header = query.get("header") or None
    if key is None and header is None:
        return None
    name, has_value, value = (header or "").partition("=")

    def matches(record: Record) -> bool:
        if key is not None and (
            record.key is None or bytes(record.key).decode("utf-8", "replace") != key
        ):
            return False
        if header is None:
            return True
        return any(
            h == name and (not has_value or bytes(v).decode("utf-8", "replace") == value)
            for h, v in record.headers
        )

    return matches


_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
WRITE_HEADER = "x-jet-console"


def _static_files() -> dict[str, tuple[bytes, str]]:
    """The shipped assets, read once: name -> (bytes, content type)."""
    root = importlib.resources.files("jetserver.console") / "static"
    out = {}
    for entry in root.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _TYPES:
            out[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return out


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def record_json(record: Record, default_subject: str) -> dict[str, Any]:
    """A record for the browser: each of key, value and header values as base64 and, when
    it is UTF-8, as text."""
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "time": datetime.fromtimestamp(record.timestamp / 1e9, UTC).isoformat(),
        "subject": record.subject or default_subject,
        "key_b64": _b64(record.key),
        "key_text": _text(record.key),
        "value_b64": _b64(record.value),
        "value_text": _text(record.value),
        "headers": [
            {"name": name, "value_b64": _b64(value), "value_text": _text(value)}
            for name, value in record.headers
        ],
    }


def _int(query: dict[str, str], name: str, default: int | None = None) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        if default is None:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"missing parameter {name!r}")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{name} must be an integer") from None
    if value < 0:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{name} must be >= 0")
    return value


def parse_time(text: str) -> datetime:
    """``time=``: an ISO-8601 time (UTC unless it says otherwise) or ms since the epoch."""
    if text.isdigit():
        return datetime.fromtimestamp(int(text) / 1000, UTC)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"time must be ISO-8601 or ms: {text!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class ConsoleApp:
    """State and routes of one console process."""

    def __init__(
        self, client: Client, sampler: ClusterSampler, *, allow_writes: bool, servers: str
    ) -> None:
        self.client = client
        self.sampler = sampler
        self.allow_writes = allow_writes
        self.servers = servers
        self.snapshot: Snapshot | None = None
        self.history = History()
        self.error: str | None = None
        self.sampled = anyio.Event()
        self.static = _static_files()
        self.tables = TableBrowser(client)
        """Live tables of the table page (run :meth:`TableBrowser.run` beside the server)."""
        self.deleted: set[str] = set()
        """Streams deleted here that the latest sample may still list (left out of the
        answers until a sample no longer has them)."""

    async def run_sampler(self, interval: float = SAMPLE_INTERVAL_S) -> None:
        """Sample forever (until cancelled), every ``interval`` seconds."""
        while True:
            began = time.monotonic()
            try:
                snap = await self.sampler.sample()
            except JetError as exc:
                self.error = f"{type(exc).__name__}: {exc}"
            else:
                self.snapshot, self.error = snap, None
                self.history.add(snap)
                self.deleted &= {info.name for info in snap.streams}
            self.sampled.set()
            await anyio.sleep(max(0.05, interval - (time.monotonic() - began)))

    async def _snap(self) -> Snapshot:
        with anyio.move_on_after(FIRST_SAMPLE_WAIT_S):
            await self.sampled.wait()
        if self.snapshot is None:
            raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, self.error or "no sample yet")
        gone = self.deleted
        if not gone:
            return self.snapshot
        snap = self.snapshot
        return attrs.evolve(
            snap,
            streams=tuple(s for s in snap.streams if s.name not in gone),
            partitions=tuple(p for p in snap.partitions if p.stream not in gone),
        )

    async def handle(self, req: Request) -> Response:
        """Route one request."""
        try:
            return await self._route(req)
        except StreamNotFound as exc:
            raise HttpError(HTTPStatus.NOT_FOUND, str(exc)) from None
        except PermissionDenied as exc:
            raise HttpError(HTTPStatus.FORBIDDEN, f"the servers refused: {exc}") from None
        except (InvalidArgument, OffsetOutOfRange) as exc:
            raise HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        except (StreamExists, CommitFailed) as exc:
            raise HttpError(HTTPStatus.CONFLICT, str(exc)) from None
        except JetError as exc:
            raise HttpError(HTTPStatus.BAD_GATEWAY, f"{type(exc).__name__}: {exc}") from None

    async def _route(self, req: Request) -> Response:
        path = req.path.rstrip("/") or "/"
        if req.method == "GET":
            if path in ("/", "/index.html"):
                return self._asset("index.html")
            if path == "/favicon.ico":
                return self._asset("favicon.svg")
            if path.startswith("/static/"):
                return self._asset(path[len("/static/") :])
            getter = {
                "/api/config": self._config,
                "/api/cluster": self._cluster,
                "/api/streams": self._streams,
                "/api/groups": self._groups,
                "/api/history": self._history,
                "/api/records": self._records,
            }.get(path)
            if getter is not None:
                return Response.json(await getter(req))
            parts = path.strip("/").split("/")
            if len(parts) == 3 and parts[:2] == ["api", "tables"] and parts[2]:
                return Response.json(await self.tables.page(parts[2], req.query))
            raise HttpError(HTTPStatus.NOT_FOUND, f"no page {path}")
        if req.method in ("POST", "DELETE"):
            self._check_write(req)
            parts = path.strip("/").split("/")
            if req.method == "POST" and parts == ["api", "streams"]:
                created = await self._create(req)
                self.deleted.clear()  # a name deleted a moment ago may be back
                return Response.json(created, HTTPStatus.CREATED)
            if req.method == "DELETE" and len(parts) == 3 and parts[:2] == ["api", "streams"]:
                await self.client.delete_stream(parts[2])
                self.deleted.add(parts[2])  # gone from the next answer, not the next sample
                return Response.json({"deleted": parts[2]})
            if req.method == "POST" and len(parts) == 4 and parts[:2] == ["api", "streams"]:
                edit = {"settings": update_stream, "purge": purge_stream}.get(parts[3])
                if edit is not None:  # console/stream_edit.py
                    return Response.json(await edit(self.client, parts[2], req.json()))
            if req.method == "POST" and parts == ["api", "records"]:
                return Response.json(await produce_record(self.client, req.json()))
            is_reset = len(parts) == 4 and parts[:2] == ["api", "groups"] and parts[3] == "reset"
            if req.method == "POST" and is_reset:
                return Response.json(await self._reset(parts[2], req))
            raise HttpError(HTTPStatus.NOT_FOUND, f"no action {req.method} {path}")
        raise HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"method {req.method} not allowed")

    def _asset(self, name: str) -> Response:
        found = self.static.get(name)
        if found is None:
            raise HttpError(HTTPStatus.NOT_FOUND, f"no asset {name!r}")
        return Response(HTTPStatus.OK, found[0], found[1])

    def _check_write(self, req: Request) -> None:
        if not self.allow_writes:
            raise HttpError(
                HTTPStatus.FORBIDDEN, "read-only console: start it with --allow-writes to change"
            )
        if req.headers.get(WRITE_HEADER) != "1":
            raise HttpError(HTTPStatus.FORBIDDEN, f"writes need the header {WRITE_HEADER}: 1")

    async def _config(self, _req: Request) -> dict[str, Any]:
        return {
            "allow_writes": self.allow_writes,
            "servers": self.servers,
            "sampled_at": self.snapshot.at if self.snapshot is not None else None,
            "error": self.error,
        }

    async def _cluster(self, _req: Request) -> dict[str, Any]:
        snap = await self._snap()
        return {
            "at": snap.at,
            "metadata_leader": snap.metadata_leader,
            "servers": list(snap.servers),
            "streams": sum(1 for s in snap.streams if not s.internal),
            "internal_streams": sum(1 for s in snap.streams if s.internal),
            # User streams' partitions; the internal ones (__groups...) counted apart, so
            # that every count matches the streams it is shown with.
            "partitions": sum(1 for p in snap.partitions if not p.internal),
            "offline": sum(1 for p in snap.partitions if p.is_offline and not p.internal),
            "under_replicated": sum(
                1 for p in snap.partitions if p.under_replicated and not p.internal
            ),
            "internal_partitions": sum(1 for p in snap.partitions if p.internal),
            "internal_offline": sum(1 for p in snap.partitions if p.is_offline and p.internal),
            "internal_under_replicated": sum(
                1 for p in snap.partitions if p.under_replicated and p.internal
            ),
            "groups": len(snap.groups),
        }

    async def _streams(self, _req: Request) -> dict[str, Any]:
        snap = await self._snap()
        out = []
        for info in snap.streams:
            rows = [p.to_json() for p in snap.partitions if p.stream == info.name]
            out.append(
                {
                    **info.to_json(),
                    "internal": info.name.startswith("__"),
                    "partition_rows": rows,
                    "size_bytes": sum(r["size_bytes"] or 0 for r in rows),
                    "messages": sum((r["hw"] or 0) - (r["log_start"] or 0) for r in rows),
                    # Partitions whose figures are unknown (offline: no live leader);
                    # "messages" and "size_bytes" leave them out.
                    "offline": sum(1 for r in rows if r["is_offline"]),
                }
            )
        return {"at": snap.at, "streams": out}

    async def _groups(self, _req: Request) -> dict[str, Any]:
        snap = await self._snap()
        return {"at": snap.at, "groups": [g.to_json() for g in snap.groups]}

    async def _history(self, _req: Request) -> dict[str, Any]:
        await self._snap()
        return self.history.to_json()

    async def _records(self, req: Request) -> dict[str, Any]:
        stream = req.query.get("stream")
        if not stream:
            raise HttpError(HTTPStatus.BAD_REQUEST, "missing parameter 'stream'")
        partition = _int(req.query, "partition", 0)
        limit = _int(req.query, "limit", 50)
        if not 1 <= limit <= MAX_RECORDS:
            # Said, not clamped: a page of other than the asked size would mislead.
            raise HttpError(
                HTTPStatus.BAD_REQUEST, f"limit must be between 1 and {MAX_RECORDS}, not {limit}"
            )
        info = await self.client.stream_info(stream, refresh=True)
        part = info.partition(partition)
        if part is None:
            raise HttpError(HTTPStatus.NOT_FOUND, f"stream {stream!r} has no partition {partition}")
        if part.is_offline:
            # At once, rather than after the client's retries for a leader that is gone.
            raise HttpError(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"partition {stream}/{partition} is offline: {part.offline}",
            )
        ends = await self.client.list_offsets(stream, partition, "earliest")
        if req.query.get("time"):
            found = await self.client.list_offsets(stream, partition, parse_time(req.query["time"]))
            start = found.offset
        elif req.query.get("offset", "") != "":
            start = _int(req.query, "offset")
            if start > ends.hw:
                raise HttpError(
                    HTTPStatus.BAD_REQUEST,
                    f"offset {start} is above the high watermark {ends.hw} of "
                    f"{stream}/{partition} (log start {ends.log_start})",
                )
        elif record_filter(req.query) is not None:
            start = ends.log_start  # a search reads from the start
        else:
            start = max(ends.log_start, ends.hw - limit)  # the last `limit` records
        start = min(max(start, ends.log_start), ends.hw)
        search = record_filter(req.query)
        subject = partition_subject(info.subject, partition)
        records: list[dict[str, Any]] = []
        offset = start
        scanned = 0
        for _ in range(_MAX_FETCHES):
            if len(records) >= limit or offset >= ends.hw or scanned >= SEARCH_MAX_SCAN:
                break
            try:
                _header, raw = await self.client.fetch(
                    stream, partition, offset, max_bytes=_FETCH_BYTES, max_wait=0
                )
            except OffsetOutOfRange as exc:
                offset = exc.log_start or offset + 1
                continue
            got = False
            for record in iter_records(raw):
                if record.offset < offset:
                    continue
                got = True
                offset = record.offset + 1
                scanned += 1
                if search is None or search(record):
                    records.append(record_json(record, subject))
                if len(records) >= limit or scanned >= SEARCH_MAX_SCAN:
                    break
            if not got:
                break
        return {
            "stream": stream,
            "partition": partition,
            "log_start": ends.log_start,
            "hw": ends.hw,
            "start": start,
            "next": offset,
            "scanned": scanned,
            "search": search is not None,
            "records": records,
        }

    async def _create(self, req: Request) -> dict[str, Any]:
        body = req.json()
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            raise HttpError(HTTPStatus.BAD_REQUEST, "body must be an object with a 'name'")
        options: dict[str, Any] = {}
        for name, kind in (
            ("partitions", int),
            ("replication_factor", int),
            ("retention_max_age", float),
            ("retention_max_bytes", int),
            ("retention_max_messages", int),
        ):
            value = body.get(name)
            if value is None or value == "":
                continue
            # A form sends strings; JSON numbers pass as they are (no bool, no 2.7 -> 2):
            # the SDK then checks them against the stream settings' limits (InvalidArgument
            # naming the setting -> 400).
            if isinstance(value, bool) or (kind is int and isinstance(value, float)):
                raise HttpError(HTTPStatus.BAD_REQUEST, f"{name} must be a whole number")
            try:
                options[name] = kind(value)
            except (TypeError, ValueError, OverflowError):
                raise HttpError(HTTPStatus.BAD_REQUEST, f"{name} must be a number") from None
        info = await self.client.create_stream(
            body["name"], body.get("subject") or None, exist_ok=False, **options
        )
        return {"created": info.to_json()}

    async def _reset(self, group: str, req: Request) -> dict[str, Any]:
        body = req.json()
        stream = body.get("stream") if isinstance(body, dict) else None
        if not isinstance(stream, str):
            raise HttpError(HTTPStatus.BAD_REQUEST, "body must name a 'stream'")
        to = body.get("to", "earliest")
        info = await self.client.stream_info(stream, refresh=True)
        wanted = body.get("partitions") or list(range(info.partition_count))
        offsets: dict[StreamPartition, int] = {}
        for p in wanted:
            if not isinstance(p, int) or not 0 <= p < info.partition_count:
                raise HttpError(HTTPStatus.BAD_REQUEST, f"no partition {p!r} in {stream!r}")
            if to in ("earliest", "latest"):
                ends = await self.client.list_offsets(stream, p, "earliest")
                offsets[StreamPartition(stream, p)] = (
                    ends.log_start if to == "earliest" else ends.hw
                )
            elif isinstance(to, int) and to >= 0:
                offsets[StreamPartition(stream, p)] = to
            else:
                raise HttpError(HTTPStatus.BAD_REQUEST, "'to' is earliest, latest or an offset")
        planned = {f"{k.stream}/{k.partition}": v for k, v in sorted(offsets.items())}
        if body.get("dry_run") is True:
            # The preview the page confirms: what each partition's committed offset is now
            # and would become; nothing is written.
            now = await group_offsets(self.client, group)
            current = {
                f"{k.stream}/{k.partition}": now[k].offset if k in now else None for k in offsets
            }
            return {"group": group, "dry_run": True, "offsets": planned, "current": current}
        await commit_offsets(self.client, group, offsets, committer="jet-console")
        return {"group": group, "offsets": planned}
