"""A large write in a worker thread and a role's end (jetserver.broker.large_writes): the
end waits for the write (it carries the ended epoch), and the write, once returned, is
answered NOT_LEADER (RoleEnded) instead of acked by a replica that no longer leads.

A real log on real files and a real FsyncRunner; the segment's write waits at a gate
(bounded); the replica is a stand-in with the log and a core's ``leading`` flag.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from jetserver.broker.large_writes import LargeWrites, RoleEnded
from jetserver.storage import Log, fsync_runner
from jetserver.storage import segment as segment_module
from jetserver.storage.fsync_runner import FsyncRunner

pytestmark = pytest.mark.anyio

GATE_S = 5.0
BODY = b"x" * (fsync_runner.LARGE_WRITE_BYTES + 1)


async def test_a_role_end_waits_for_the_large_write_which_is_answered_not_leader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held, gate = threading.Event(), threading.Event()
    real = segment_module.write_all

    def gated(fd: int, data: Any, at: int) -> None:
        held.set()
        gate.wait(GATE_S)
        real(fd, data, at)

    monkeypatch.setattr(segment_module, "write_all", gated)
    log = Log.open(tmp_path / "p")
    core = SimpleNamespace(leading=True)
    base: Any = SimpleNamespace(log=log, core=core)
    large, runner = LargeWrites(), FsyncRunner()
    assert runner.is_large([BODY])
    outcome: list[object] = []
    ended_at: list[int] = []
    try:
        with anyio.fail_after(GATE_S):
            async with anyio.create_task_group() as tg:

                async def write() -> None:
                    try:
                        outcome.append(await large.append(runner, base, [BODY], 0))
                    except RoleEnded as exc:
                        outcome.append(exc)

                async def end_role() -> None:
                    core.leading = False
                    await large.done()
                    ended_at.append(log.log_end_offset)

                tg.start_soon(write)
                while not held.is_set():  # noqa: ASYNC110 - a thread's event
                    await anyio.sleep(0.005)
                tg.start_soon(end_role)
                await anyio.sleep(0.05)  # room for a wrong end_role to finish early
                assert not ended_at, "the role's end did not wait for the write"
                assert log.log_end_offset == 0  # the LEO moves after the write returned
                gate.set()
    finally:
        gate.set()
        log.close()
    assert ended_at == [1]
    assert [type(o) for o in outcome] == [RoleEnded]
    assert runner.thread_large_writes == 1
