"""deploy/prometheus/alerts.yml: promtool accepts it, its unit tests (alerts_test.yml: the
offline alert fires from the metadata leader's count alone) pass, and every jet metric it
names is one a real server exports. promtool comes with Debian's ``prometheus`` package;
the promtool checks skip with the reason without it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support.jet_server import running_server
from support.nats_server import NatsServer

from .test_grafana_dashboard import exported_names, scrape

RULES_DIR = Path(__file__).parents[2] / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)"
)


def rule_exprs() -> dict[str, str]:
    """Alert name -> its expression (each rule's ``expr:`` is on one line; no YAML
    library needed)."""
    text = (RULES_DIR / "alerts.yml").read_text()
    found = re.findall(r"^\s*- alert: (\S+)\n\s*expr: (.+)$", text, re.MULTILINE)
    assert found, "no rule found"
    return dict(found)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=60, check=False
    )


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    done = promtool("check", "rules", "alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in done.stdout


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    done = promtool("test", "rules", "alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_offline_alerts_exist() -> None:
    exprs = rule_exprs()
    assert "jet_partitions_offline" in exprs["JetPartitionsOffline"]
    assert "jet_partitions_under_min_isr" in exprs["JetPartitionsUnderMinIsr"]
    assert "jet_partitions_under_replicated" in exprs["JetPartitionsUnderReplicated"]


@pytest.mark.anyio
async def test_every_metric_named_is_exported(nats_server: NatsServer, tmp_path: Path) -> None:
    named = {n for e in rule_exprs().values() for n in re.findall(r"\bjet_[a-z0-9_]+", e)}
    async with running_server(nats_server.url, tmp_path / "data", metrics__port=0) as server:
        assert server.metrics_address is not None
        status, text = await scrape(server.metrics_address)
    assert status == 200
    # A server alone leads its own metadata: it exports the partition counts.
    assert re.search(r"^jet_metadata_leader 1$", text, re.MULTILINE)
    missing = sorted(named - exported_names(text))
    assert not missing, f"the alert rules name metrics no server exports: {missing}"
