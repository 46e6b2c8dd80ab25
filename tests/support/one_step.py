"""A one-step path's switch for equivalence tests: a method that returns None to send its
caller the general way (``OneProduce.serve``, ``FetchStream.next_tail``), counted when on
and always None when off, so the same requests can be served both ways and compared."""

from __future__ import annotations

from typing import Any

import pytest


class OneStepSwitch:
    """Switches ``owner.name`` (an async method) between counting and never taken."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> None:
        self._monkeypatch = monkeypatch
        self._owner = owner
        self._name = name
        self._real = getattr(owner, name)
        self.taken = 0
        """Calls that returned something (the step served them) while on."""

    def on(self) -> None:
        """The real method, its results counted."""
        real = self._real

        async def counting(obj: object, *args: Any) -> Any:
            out = await real(obj, *args)
            self.taken += out is not None
            return out

        self._monkeypatch.setattr(self._owner, self._name, counting)

    def off(self) -> None:
        """Never taken: every call goes the general way."""

        async def never(obj: object, *args: Any) -> None:
            return None

        self._monkeypatch.setattr(self._owner, self._name, never)
