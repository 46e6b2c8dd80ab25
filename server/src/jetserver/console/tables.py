"""The console's table page: a compacted stream's latest value per key (issue 38).

::

    GET /api/tables/STREAM[?prefix=P][&after=CURSOR][&limit=L]
        {"stream", "keys": keys in the table, "matching": keys with the prefix,
         "entries": [{"key_text", "key_b64", "value_text", "value_b64", "revision",
                      "partition"}, ...],       (keys in byte order)
         "next": the cursor of the next page, or null}

The console holds a live :class:`jetsdk.Table` per stream shown (at most
:data:`MAX_OPEN_TABLES`; the one shown longest ago is closed first), so paging through a
big table reads it once. Each page first syncs its view: it shows everything acknowledged
before the request. A table is owned by its own task in :meth:`TableBrowser.run` (a
table's readers live in a task group, which must be left by the task that entered it).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import time
from collections import OrderedDict
from http import HTTPStatus
from typing import Any

import anyio
import anyio.abc
import attrs

from jetsdk import Client, JetError, Table
from jetserver.console.http import HttpError
from jetserver.observe.held import Held

MAX_OPEN_TABLES = 4
"""Tables the console keeps live at once."""
OPEN_TIMEOUT_S = 60.0
"""Bound on opening (loading) a table for its first page."""
SYNC_TIMEOUT_S = 10.0
"""Bound on a page's sync of its view."""
MAX_PAGE = 500
"""Most entries in one page."""


def _text(data: bytes) -> str | None:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def _cursor(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


def _key_of(cursor: str) -> bytes:
    try:
        return base64.b64decode(cursor.encode(), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise HttpError(
            HTTPStatus.BAD_REQUEST, f"after must be a cursor from 'next', not {cursor!r}"
        ) from None


@attrs.define(eq=False)
class _LiveTable:
    """One live table, held by a task of its own, and its sorted keys."""

    held: Held[Table] = attrs.field(factory=Held)
    sorted_keys: list[bytes] = attrs.field(factory=list)
    sorted_at: list[int] | None = None
    """The view's positions when ``sorted_keys`` was made (None: never)."""

    def keys(self, table: Table) -> list[bytes]:
        """The table's keys in byte order, sorted again only when the view moved."""
        positions = table.positions
        if positions != self.sorted_at:
            self.sorted_keys = sorted(key for key, _ in table.items())
            self.sorted_at = positions
        return self.sorted_keys


class TableBrowser:
    """Live tables for the console's table page."""

    def __init__(self, client: Client, *, max_open: int = MAX_OPEN_TABLES) -> None:
        self.client = client
        self.max_open = max_open
        self._live: OrderedDict[str, _LiveTable] = OrderedDict()
        self._tg: anyio.abc.TaskGroup | None = None
        self._running = anyio.Event()

    async def run(self) -> None:
        """Own the open tables until cancelled (start it beside the server)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self._running.set()
            try:
                await anyio.sleep_forever()
            finally:
                self._tg = None

    async def page(self, stream: str, query: dict[str, str]) -> dict[str, Any]:
        """The answer of ``GET /api/tables/STREAM``."""
        prefix = query.get("prefix", "").encode()
        after = _key_of(query["after"]) if query.get("after") else None
        try:
            limit = int(query.get("limit", "50"))
        except ValueError:
            raise HttpError(HTTPStatus.BAD_REQUEST, "limit must be an integer") from None
        if not 1 <= limit <= MAX_PAGE:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"limit must be 1..{MAX_PAGE}")
        live = await self._open(stream)
        table = live.held.value
        assert table is not None
        with anyio.fail_after(SYNC_TIMEOUT_S):
            await table.sync()
        keys = live.keys(table)
        matching = [k for k in keys if k.startswith(prefix)] if prefix else keys
        start = 0
        if after is not None:
            start = bisect.bisect_right(matching, after)
        shown = matching[start : start + limit]
        entries = []
        for key in shown:
            entry = table.entry(key)
            if entry is None:  # expired since the sort
                continue
            entries.append(
                {
                    "key_text": _text(key),
                    "key_b64": base64.b64encode(key).decode(),
                    "value_text": _text(entry.value),
                    "value_b64": base64.b64encode(entry.value).decode(),
                    "revision": entry.revision,
                    "partition": entry.partition,
                }
            )
        more = start + limit < len(matching)
        return {
            "stream": stream,
            "keys": len(keys),
            "matching": len(matching),
            "entries": entries,
            "next": _cursor(shown[-1]) if more and shown else None,
        }

    async def _open(self, stream: str) -> _LiveTable:
        live = self._live.get(stream)
        if live is None or live.held.ended:
            with anyio.fail_after(OPEN_TIMEOUT_S):
                await self._running.wait()
            tg = self._tg
            if tg is None:
                raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "the console is stopping")
            live = _LiveTable()
            self._live[stream] = live
            tg.start_soon(self._hold, stream, live)
            while len(self._live) > self.max_open:
                _, oldest = self._live.popitem(last=False)
                oldest.held.closing.set()
        self._live.move_to_end(stream)
        held = live.held
        began = time.monotonic()
        with anyio.move_on_after(OPEN_TIMEOUT_S):
            await held.ready.wait()
        if not held.ready.is_set():
            raise HttpError(
                HTTPStatus.GATEWAY_TIMEOUT,
                f"table {stream!r} still loading after {time.monotonic() - began:.0f} s",
            )
        if held.value is None:
            self._live.pop(stream, None)
            error = held.error
            if isinstance(error, JetError):
                raise error
            raise HttpError(HTTPStatus.BAD_GATEWAY, f"table {stream!r} failed: {error!r}")
        return live

    async def _hold(self, stream: str, live: _LiveTable) -> None:
        try:  # an error is shown on the page; the console keeps serving
            await live.held.run(lambda: Table(self.client, stream), Exception)
        finally:
            if self._live.get(stream) is live and live.held.error is None:
                self._live.pop(stream, None)
