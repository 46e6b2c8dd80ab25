"""support.timeout_guard: a test whose failure is reported after its timeout would have
gone off is reported as failed, and the run goes on (no INTERNALERROR)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.timeout_guard import held_alarm

TESTS = Path(__file__).resolve().parents[1]
SLOW_REPORT = """
import time
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    if call.when == "call" and call.excinfo is not None:
        time.sleep(1.5)  # a failure's report made slowly, past the test's 1 s bound
"""
GUARD = """
import pytest
from support.timeout_guard import held_alarm

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport():
    with held_alarm():
        yield
"""
TESTS_FILE = """
import time
import pytest

@pytest.mark.timeout(1)
def test_fails_at_once():
    assert 1 == 2

@pytest.mark.timeout(1)
def test_hangs():
    time.sleep(5)

def test_runs_after():
    pass
"""


def _run(folder: Path, conftest: str) -> subprocess.CompletedProcess[str]:
    (folder / "conftest.py").write_text(conftest)
    (folder / "test_x.py").write_text(TESTS_FILE)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_timeout"],
        cwd=folder,
        # Only pytest-timeout: the others' imports (hypothesis, anyio, xdist) are not tested.
        env={
            "PYTHONPATH": str(TESTS),
            "PATH": "/usr/bin:/bin",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(sys.platform == "win32", reason="pytest-timeout's signal method")
def test_a_failure_reported_past_the_timeout_fails_the_test_not_the_run(tmp_path: Path) -> None:
    (tmp_path / "bare").mkdir()
    (tmp_path / "guarded").mkdir()
    bare = _run(tmp_path / "bare", SLOW_REPORT)
    assert "INTERNALERROR" in bare.stdout + bare.stderr  # what the guard is for
    guarded = _run(tmp_path / "guarded", SLOW_REPORT + GUARD)
    assert "INTERNALERROR" not in guarded.stdout + guarded.stderr, guarded.stdout
    assert "2 failed, 1 passed" in guarded.stdout, guarded.stdout
    assert "Timeout (>1.0s)" in guarded.stdout  # the hanging test still timed out


def test_the_timer_is_armed_again_with_what_it_had_left() -> None:
    with held_alarm():  # this test's own pytest-timeout alarm, held meanwhile
        signal.setitimer(signal.ITIMER_REAL, 50.0)
        try:
            with held_alarm():
                assert signal.getitimer(signal.ITIMER_REAL)[0] == 0.0
            left = signal.getitimer(signal.ITIMER_REAL)[0]
            assert 49.0 < left <= 50.0
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        with held_alarm():  # not armed: stays so
            pass
        assert signal.getitimer(signal.ITIMER_REAL)[0] == 0.0
