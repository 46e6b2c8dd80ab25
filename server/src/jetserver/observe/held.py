"""An async context (a :class:`jetsdk.Client`, a :class:`jetsdk.Table`) kept open across
requests by a task of its own.

A Client or a Table must be exited by the task that entered it (its readers live in a task
group), so a tool that keeps one open between requests enters it in a task that holds it
until told to close: :meth:`Held.run`. The sampler's clients per server
(:mod:`jetserver.observe.server_links`) and the console's live tables
(:mod:`jetserver.console.tables`) are held so.

Task safety: one event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Generic, TypeVar

import anyio
import attrs

__all__ = ["Held"]

T = TypeVar("T")


@attrs.define(eq=False)
class Held(Generic[T]):
    """One async context's value, entered, held and exited by :meth:`run` in its task."""

    ready: anyio.Event = attrs.field(factory=anyio.Event)
    """Set once :attr:`value` is in, or once :meth:`run` ended without it."""
    closing: anyio.Event = attrs.field(factory=anyio.Event)
    """Set it to have :meth:`run` exit the context."""
    value: T | None = None
    """The context's value while it is held (None before and after)."""
    error: BaseException | None = None
    """The exception the context failed with (one that :meth:`run` was told to catch)."""
    ended: bool = False
    """:meth:`run` has ended: the context is exited, :attr:`value` gone for good."""

    async def run(
        self,
        open_context: Callable[[], AbstractAsyncContextManager[T]],
        catch: type[BaseException] | tuple[type[BaseException], ...],
    ) -> None:
        """Enter the context ``open_context`` makes, hold its value until :attr:`closing`
        is set, then exit it. An exception of ``catch`` (making, entering, holding or
        exiting it) is kept in :attr:`error`; any other propagates. :attr:`ready` is set
        either way."""
        try:
            async with open_context() as value:
                self.value = value
                self.ready.set()
                await self.closing.wait()
        except catch as exc:
            self.error = exc
        finally:
            self.value = None
            self.ended = True
            self.ready.set()
