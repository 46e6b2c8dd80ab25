"""The replicas' ``run`` tasks as plain asyncio tasks under one guard (issue 34: an anyio
task cost 2.7 KB more per idle partition), with the structure of the task group they ran
in before: a replica's error fails the server's task group, an error before it ran is
raised to the caller, and a cancelled server task group stops the running replicas and
waits for their shielded ending (the logs closed) instead of cutting it."""

from __future__ import annotations

import anyio
import pytest

from jetserver.broker.lifecycle import Lifecycle
from jetserver.broker.replica_tasks import ReplicaTasks
from jetserver.infra.lazy_event import LazyEvent

pytestmark = pytest.mark.anyio

BOUND_S = 10.0


class FakeReplica:
    """The shape of ``PartitionReplica.run``: a task group open while it runs, the ending
    shielded (here: a checkpoint, then ``closed``), ended by :meth:`stop`."""

    def __init__(self, *, fail_before: bool = False) -> None:
        self.life = Lifecycle()
        self.fail_before = fail_before
        self.fail_now = LazyEvent()
        self.stops = 0
        self.closed = False

    def stop(self) -> None:
        self.stops += 1
        self.life.stopping = True
        self.fail_now.set()

    async def run(self) -> None:
        life = self.life
        try:
            async with anyio.create_task_group() as tg:
                if self.fail_before:
                    raise RuntimeError("could not open")
                life.tg = tg
                life.run_started.set()
                await self.fail_now.wait()
                if not life.stopping:
                    raise RuntimeError("replica bug")
        finally:
            life.tg = None
            life.run_started.set()
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)  # the final flush and close
                self.closed = True


async def test_an_error_after_the_replica_ran_fails_the_servers_task_group() -> None:
    tasks = ReplicaTasks()
    replica, other = FakeReplica(), FakeReplica()

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(tasks.guard)
            await tasks.start(replica.run(), replica.life, replica.stop)
            await tasks.start(other.run(), other.life, other.stop)
            assert len(tasks) == 2
            replica.fail_now.set()  # not stopping: run raises
            await anyio.sleep_forever()

    with anyio.fail_after(BOUND_S), pytest.raises(ExceptionGroup) as caught:
        await serve()
    assert caught.group_contains(RuntimeError, match=r"^replica bug$")
    # The guard's end stopped the other replica and waited for its ending.
    assert other.stops == 1
    assert other.closed
    assert len(tasks) == 0


async def test_an_error_before_the_replica_ran_is_raised_to_the_caller_only() -> None:
    tasks = ReplicaTasks()
    broken, fine = FakeReplica(fail_before=True), FakeReplica()
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(tasks.guard)
            with pytest.raises(ExceptionGroup) as caught:  # its run's own task group
                await tasks.start(broken.run(), broken.life, broken.stop)
            assert caught.group_contains(RuntimeError, match=r"^could not open$")
            assert broken.closed  # its ending ran before the error came out
            await tasks.start(fine.run(), fine.life, fine.stop)
            await anyio.sleep(0.05)  # the guard did not fail (it would cancel this)
            tg.cancel_scope.cancel()
    assert fine.closed
    assert broken.stops == 0


async def test_a_cancelled_server_stops_the_running_replicas_and_awaits_their_ending() -> None:
    tasks = ReplicaTasks()
    replicas = [FakeReplica() for _ in range(5)]
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(tasks.guard)
            for r in replicas:
                await tasks.start(r.run(), r.life, r.stop)
            tg.cancel_scope.cancel()
    # Asked to stop (not cancelled): each ending ran to its end before the group exited.
    assert [r.stops for r in replicas] == [1] * 5
    assert all(r.closed for r in replicas)
    assert len(tasks) == 0
