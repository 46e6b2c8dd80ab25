"""The local-cluster tests share one Spark driver on ``local-cluster[2,1,1024]`` (driver.py
``serve``): one driver JVM and two executor JVMs for the package, not a driver with its
executors per test (the pair took 81 CPU-s so, 111 with a driver each, on the 2-core dev
VM). The test that kills the driver (a module with ``ENDS_THE_DRIVER = True``) runs after
the others.

Being a package-scoped fixture, ``local_cluster`` puts these tests on one xdist worker
(tests/support/parallel.py), apart from the shared SparkSession's tests (``spark``). They
use the worker's `jet dev` (``jet_dev``), not ``spark_jet``: the jet server is not what
they share.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .processes import SharedDriver

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Within this package's run of tests, those of ``ENDS_THE_DRIVER`` modules go last
    (the others keep their order and the places this package's tests held)."""
    places = [i for i, item in enumerate(items) if item.path.resolve().parent == HERE]
    mine = [items[i] for i in places]
    mine.sort(key=lambda item: bool(getattr(item.module, "ENDS_THE_DRIVER", False)))  # type: ignore[attr-defined]
    for place, item in zip(places, mine, strict=True):
        items[place] = item


@pytest.fixture(scope="package")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDriver]:
    """The package's shared driver (skip without Java)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java for Spark")
    shared = SharedDriver(tmp_path_factory.mktemp("local-cluster"))
    try:
        yield shared
    finally:
        shared.close()
