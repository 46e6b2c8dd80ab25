"""CLI tests run `jet` as a subprocess against the module's `jet dev`."""

from collections.abc import Iterator

import pytest

from support.jet_dev import JetDev


@pytest.fixture(scope="package")
def dev3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JetDev]:
    """`jet dev --servers 3`, shared by the tests of jet bench, jet top and jet console."""
    dev = JetDev.start(tmp_path_factory.mktemp("jet-dev3") / "data", servers=3)
    try:
        yield dev
    finally:
        dev.stop()
