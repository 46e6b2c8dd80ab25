"""The docs site (mkdocs.yml) builds in strict mode: no warning, no broken link or anchor, no
docstring that mkdocstrings cannot read; and it holds every page it should (issue 36).

It needs the builders (noxfile.py, DOCS_DEPS) in the test's environment and skips without
them; CI builds the site strictly with `nox -s docs` (.ci/run).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from doc_examples.blocks import ROOT

BUILD_TIMEOUT_S = 300.0


@pytest.mark.timeout(BUILD_TIMEOUT_S + 60)
def test_the_site_builds_strictly_with_every_page(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed here (CI builds the site with nox -s docs)")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    for spec in sorted((ROOT / "spec").glob("*.md")):
        page = "index.html" if spec.stem == "README" else f"{spec.stem}/index.html"
        assert (site / "spec" / page).is_file(), f"spec/{spec.name} is not rendered"
    for vector in sorted((ROOT / "spec" / "vectors").glob("*.json")):
        assert (site / "spec" / "vectors" / vector.name).read_bytes() == vector.read_bytes()
    reference = (site / "reference" / "jetsdk" / "index.html").read_text()
    for name in ("jetsdk.client.Client", "jetsdk.producer.Producer", "jetsdk.consumer.Consumer"):
        assert f'id="{name}"' in reference, f"{name} is missing from the API reference"
    testing = (site / "reference" / "testing" / "index.html").read_text()
    assert 'id="jetserver.testing.Cluster"' in testing
    for page in ("tutorial", "howto/from-jetstream", "howto/from-kafka", "latency"):
        assert (site / page / "index.html").is_file(), page
