"""A control plane for tests that drive replicas without the metadata Raft
(:class:`jetserver.replication.control.ControlPlane`): it refuses every ISR change and records
the silent-leader reports. It has no liveness probes (no ``server_down``): a test that needs
them adds them."""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from jetserver.replication.control import IsrChange


class RecordingControl:
    """Refuses ISR changes; records silent-leader reports in :attr:`reports`."""

    def __init__(self, server_id: str) -> None:
        self.server_id = server_id
        self.stopping = False
        """As :attr:`jetserver.cluster.Controller.stopping`: this server began a graceful stop."""
        self.reports: list[tuple[str, int]] = []
        """(stream, partition) of every silent-leader report, in order."""
        self.reported = anyio.Event()
        """Set at the first report."""

    async def propose_isr(
        self,
        stream: str,
        partition: int,
        leader_epoch: int,
        isr: tuple[str, ...],
        *,
        partition_epoch: int | None = None,
    ) -> bool:
        return False

    async def propose_isrs(self, changes: Sequence[IsrChange]) -> list[bool]:
        return [False for _ in changes]

    async def report_leader_silent(
        self, stream: str, partition: int, leader_epoch: int, reporter: str
    ) -> None:
        self.reports.append((stream, partition))
        self.reported.set()
