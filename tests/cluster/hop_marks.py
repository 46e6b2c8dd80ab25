"""A 3-server cluster with the hop trace on (``JET_HOP_TRACE``) and the marks its servers
write as they exit (server/src/jetserver/infra/hops.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cluster.harness import Cluster


@contextmanager
def traced_cluster(root: Path, settings: dict[str, Any] | None = None) -> Iterator[Cluster]:
    """A 3-server cluster under ``root`` whose servers write their hop marks to
    ``root / "hops"`` (``<prefix>.<pid>``: :func:`marks_of`)."""
    env = {f"s{i}": {"JET_HOP_TRACE": str(root / "hops")} for i in (1, 2, 3)}
    with Cluster(root=root / "c", size=3, settings=settings or {}, server_env=env) as cluster:
        yield cluster


def marks_of(root: Path, pid: int) -> list[tuple[str, int]]:
    """The hop marks the stopped server ``pid`` of :func:`traced_cluster` wrote (``name
    ns`` lines)."""
    lines = Path(f"{root / 'hops'}.{pid}").read_text(encoding="ascii").splitlines()
    return [(name, int(ns)) for name, ns in (line.split() for line in lines)]
