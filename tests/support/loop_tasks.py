"""The tasks an event loop makes for jetserver's coroutines while a block runs (a
request answered with no task makes none)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def tasks_made() -> Iterator[list[str]]:
    """The tasks the running loop makes meanwhile for jetserver's coroutines (names)."""
    loop = asyncio.get_running_loop()
    made: list[str] = []
    before = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Future[Any]:
        code = getattr(coro, "cr_code", None)
        if code is not None and "/jetserver/" in code.co_filename:
            made.append(code.co_qualname)
        if before is None:
            return asyncio.Task(coro, loop=loop, **kw)
        return before(loop, coro, **kw)

    loop.set_task_factory(factory)
    try:
        yield made
    finally:
        loop.set_task_factory(before)
