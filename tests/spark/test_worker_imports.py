"""What a Spark Python worker imports of jetspark (issue 37).

A worker imports the module its pickled object names: ``jetspark.source`` for the data
source and its readers, ``jetspark.foreach_batch`` for the sink's functions. Each imports
what its code path needs, not the whole package: a worker that only asks for the schema
(Spark's create_data_source) imports neither the SDK's client nor Arrow, a reading one not
the writers nor the SDK's consumer. Checked in a fresh interpreter, as a worker starts.
"""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

import jetspark

IMPORT_TIMEOUT_S = 120.0
"""Bound on one fresh interpreter's imports (a loaded 2-core machine)."""

NOT_IMPORTED = {
    "jetspark.source": (
        "jetsdk.client",
        "anyio",
        "pyarrow",
        "jetspark._read",
        "jetspark._write",
        "jetspark.foreach_batch",
        "jetsdk.consumer",
    ),
    "jetspark.source,jetspark._read": (
        "jetspark._write",
        "jetspark.foreach_batch",
        "jetspark.table",
        "jetsdk.consumer",
        "pyarrow.compute",
    ),
    "jetspark.foreach_batch": (
        "jetspark.source",
        "jetspark._read",
        "jetsdk.consumer",
    ),
}
"""Modules a worker's imports (comma-separated) must leave out."""


@pytest.mark.parametrize("modules", sorted(NOT_IMPORTED))
def test_a_worker_imports_only_its_code_path(modules: str) -> None:
    script = (
        "import importlib, sys, orjson\n"
        f"for name in {modules.split(',')!r}:\n"
        "    importlib.import_module(name)\n"
        "sys.stdout.write(orjson.dumps(sorted(sys.modules)).decode())\n"
    )
    out = subprocess.check_output([sys.executable, "-c", script], timeout=IMPORT_TIMEOUT_S)
    loaded = set(orjson.loads(out))
    assert set(modules.split(",")) <= loaded
    assert sorted(loaded & set(NOT_IMPORTED[modules])) == []


def test_the_package_names_resolve_on_first_use() -> None:
    from jetspark import foreach_batch, offsets_mirror, source

    assert jetspark.FORMAT == source.FORMAT == "jetstream"
    assert jetspark.JetStreamDataSource is source.JetStreamDataSource
    assert jetspark.foreach_batch_sink is foreach_batch.foreach_batch_sink
    assert jetspark.BatchResult is foreach_batch.BatchResult
    assert jetspark.group_lag is offsets_mirror.group_lag
    assert sorted(dir(jetspark)) == sorted(jetspark.__all__)
    for name in jetspark.__all__:
        assert getattr(jetspark, name) is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = jetspark.no_such_name  # type: ignore[attr-defined]
