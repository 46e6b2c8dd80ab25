"""MarkerSync: partitions opened at once share file-system syncs (group commit), and each
waits for one that started after it asked."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from jetserver.broker.stream_files import MarkerSync

pytestmark = pytest.mark.anyio


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
