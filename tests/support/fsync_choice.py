"""Pinning the fsync runner's choice of the event loop in a test
(jetserver.storage.fsync_runner)."""

from __future__ import annotations

import pytest

from jetserver.storage import fsync_runner


def fsyncs_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the runner choose the loop for every fsync it may run there: no slow-disk
    back-off, no share limit, and the loop always free (a test's own client shares the
    server's loop, which would make it look busy)."""
    monkeypatch.setattr(fsync_runner, "SLOW_FSYNC_S", 60.0)
    monkeypatch.setattr(fsync_runner, "LOOP_SHARE", 1.0)

    async def free(_loop: object = None) -> bool:
        return True

    monkeypatch.setattr(fsync_runner, "_loop_free", free)
    monkeypatch.setattr(fsync_runner, "free_after_turn", lambda _loop, _since: True)
