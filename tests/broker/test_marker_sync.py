"""MarkerSync: partitions opened at once share file-system syncs (group commit), and each
waits for one that started after it asked; LogCloser at a server's stop writes the
clean-shutdown markers only after a sync of what the closes wrote."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from jetserver.broker.stream_files import LogCloser, MarkerSync
from jetserver.storage import Log
from storage.helpers import SMALL, bodies

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_concurrent_callers_share_syncs_and_each_gets_a_later_one(tmp_path: Path) -> None:
    sync = MarkerSync(tmp_path)
    done: list[int] = []

    async def caller() -> None:
        asked = sync.syncs
        await sync.after()
        assert sync.syncs > asked  # a sync completed after it asked
        done.append(sync.syncs)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(caller)
    assert len(done) == 20
    assert 1 <= sync.syncs <= 2  # the first caller's sync, then one for everyone else
    before = sync.syncs
    await sync.after()
    assert sync.syncs == before + 1  # alone: a sync of its own


async def test_a_stop_closes_logs_then_syncs_then_writes_every_marker(tmp_path: Path) -> None:
    # LogCloser(defer_markers=True), as a server's stop uses it: no marker is on disk
    # until finish(), which syncs (the unsynced index files) before writing them; the next
    # open of every log is then clean.
    dirs = [tmp_path / f"p{i}" for i in range(5)]
    for d in dirs:
        with Log.open(d, SMALL) as log:
            log.append(bodies(30, size=30), 1, 0)
            log.flush()
            log.set_high_watermark(log.log_end_offset)
    sync = MarkerSync(tmp_path)
    closer = LogCloser(sync_marker=False, defer_markers=True)
    logs = [Log.open(d, SMALL) for d in dirs]
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for log in logs:
                tg.start_soon(closer.close, log)
        assert not [d for d in dirs if (d / "clean-shutdown").exists()]
        assert sync.syncs == 0
        await closer.finish(sync)
    assert sync.syncs == 2  # the index files', then the markers'
    for d in dirs:
        with Log.open(d, SMALL) as log:
            assert log.recovery.clean_shutdown
            assert log.recovery.indexes_rebuilt == 0
            assert log.log_end_offset == 30
    await LogCloser(defer_markers=True).finish(sync)  # nothing closed: one sync, no markers
    assert sync.syncs == 3
