"""How the suite runs in parallel (pytest-xdist, ``nox -s tests`` passes ``-n``): which
tests must share a worker, and which start first.

- **Groups** (``--dist loadgroup``): a test that uses a fixture of module scope defined in
  tests/ (a `jet dev`, a cluster) runs on the same worker as the rest of its module, and
  one that uses a package- or session-scoped one (Spark's JVM, the CLI tests' 3-server
  `jet dev` and console) on the same worker as the rest of that conftest's tests: each such
  fixture then starts once per run, as in a serial run. Every other test is its own unit
  of work. Fixtures cheap to make again per worker (:data:`CHEAP_SHARED`) group nothing.
- **Order**: the longest units start first (:data:`START_FIRST`: the Spark group, then the
  multi-server and fault tests), so that no long test starts last and runs alone at the
  end while the other workers idle. Within a rank the collection order is kept.

Per-worker isolation needs nothing here: every port is picked free at start (port 0, or
:func:`jetserver.testing.free_ports` just before use), every data directory is under the
test's own ``tmp_path`` (xdist gives each worker its own base directory), and every
process a test starts is stopped by its PID.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS_ROOT = Path(__file__).resolve().parent.parent
"""The tests/ directory."""
CHEAP_SHARED = frozenset({"fsync_shim", "ca", "other_ca"})
"""Session fixtures cheap enough to make once per worker (a compiled shim, throwaway CAs):
they do not tie their tests to one worker."""
START_FIRST = ("tests/spark", "tests/cluster/", "tests/cli")
"""Start ranks by where a unit lives (its group, else the test's node id): the first prefix
it starts with is its rank; units matching none start last."""


def is_distributed(config: pytest.Config) -> bool:
    """True in an xdist worker (``-n``): the workers collect, the controller schedules."""
    return hasattr(config, "workerinput")


def shared_group(item: pytest.Item) -> str | None:
    """The group of ``item``: the conftest directory of a package/session fixture it uses,
    else its module if it uses a module-scoped fixture of tests/, else None."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    module_group: str | None = None
    for name in item.fixturenames:  # type: ignore[attr-defined]
        defs = info.name2fixturedefs.get(name)
        if not defs or name in CHEAP_SHARED:
            continue
        fixture = defs[-1]
        source = Path(fixture.func.__code__.co_filename).resolve()
        if not source.is_relative_to(TESTS_ROOT):
            continue
        where = source.parent.relative_to(TESTS_ROOT.parent).as_posix()
        if fixture.scope in ("package", "session"):
            return where
        if fixture.scope == "module":
            module_group = item.nodeid.split("::", 1)[0]
    return module_group


def start_rank(item: pytest.Item) -> int:
    """The start rank of ``item`` (see :data:`START_FIRST`); lower starts earlier."""
    name = shared_group(item) or item.nodeid
    for rank, prefix in enumerate(START_FIRST):
        if name.startswith(prefix):
            return rank
    return len(START_FIRST)


def arrange(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist: mark each test's group and put the longest units first (in place)."""
    if not is_distributed(config):
        return
    for item in items:
        group = shared_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=start_rank)
