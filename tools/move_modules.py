"""Issue 37 (item 2, last bullet): the server's loose top-level modules into the packages
they serve. A replayable script: run it on a clean tree, review, commit.

    python tools/move_modules.py            # git mv + rewrite every reference, then ruff
    python tools/move_modules.py --dry-run  # print what it would move, change nothing

It refuses to run on a dirty tree (its result is then one reviewable diff). It is
idempotent: a module already at its new place is not moved again, and the rewrites only
match the old names (run it again after merging a branch that still says the old ones).
No compatibility shims: the old names stop existing (the issue: "deprecated aliases go").

What stays at the top of ``jetserver``: ``__init__`` (the version), ``server`` (the
assembly of everything below: its name is the package's purpose), ``errors`` (every
package's exception roots) and ``logs`` (the root logging setup every package uses).

Where the others go, by the package they serve (one line each):

- ``jetserver.config``: the server's configuration (``server``; its ``[cluster]`` section
  cut out to ``cluster``, :data:`SPLITS`: the longer import names took the module from
  599 to 605 lines), its TOML/env/flag loader (``load``) and the validators every
  package's config section uses (base layer; the package's ``__init__`` is empty, so
  ``jetserver.config.validators`` imports no section: no cycle with ``raft.config``...).
- ``jetserver.natslink``: the server's NATS connection (nats-py) behind the broker's
  ``NatsPort``: link, connect, read, fast path, flush, write, shared rounds (server layer;
  ``natsproto`` stays the sans-I/O wire codec, a base-layer leaf).
- ``jetserver.storage``: where fsyncs run (runner, worker threads, flush-behind, epoch
  checkpoint writes) and the fatal stop on a broken durability promise (already the
  storage layer in the contract).
- ``jetserver.metrics``: the Prometheus exposition, the cluster counts and the HTTP
  endpoint (server layer; not ``observe``, which is the SDK-only tools layer).
- ``jetserver.infra``: small process-wide primitives used across layers: hop marks, the
  lazy event, runtime settings (base layer), OS resources (its own layer above storage).
- ``jetserver.broker.gc_pause``: only the broker opens partitions in bulk.
- ``jetserver.testing.devcluster``: ``jet dev``'s cluster is the test kit's ``Cluster``.
- ``jetserver.cli.demo``, ``jetserver.cli.demo_storage``: the user-facing demos, beside
  the commands (``python -m jetserver.cli.demo``).

Each new package's ``__init__`` holds a docstring only (nothing re-exported).

What it rewrites, in tracked text files under server/, sdk/, tests/, tools/, bench/,
spec/, docs/, .ci/, noxfile.py, every *.md and pyproject*.toml (not this file): dotted
names (imports, ``-m``, mock and monkeypatch targets, logger names, docs; a bare
``jetserver.config`` or ``jetserver.metrics`` is left: it names the package now, while
``jetserver.config.X`` and ``from jetserver.config import X`` go to ``config.server``
unless X is one of the package's modules), ``from
jetserver import x`` statements (split per new package, the local name kept), paths
``jetserver/x.py`` and file names ``x.py`` that name only one file, the layer contract of
tools/check_layers.py (entries collapsed per package), the importers of the names of a
split-off section, and ARCHITECTURE.md's prose and the docstrings the longer names pushed
over 100 columns (:data:`PROSE`: exact fragments, reported when not found). Then ``ruff
check --select I --fix`` and ``ruff format`` on the files it changed. At the end it lists
the mentions left of renamed module names (``nats_link`` ...) for a person to read; run
``ruff check .`` for a line a longer name pushed over 100 columns.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "server" / "src"
ME = Path(__file__).resolve().relative_to(ROOT).as_posix()

MOVES: dict[str, str] = {
    "jetserver.config": "jetserver.config.server",
    "jetserver.config_load": "jetserver.config.load",
    "jetserver.validators": "jetserver.config.validators",
    "jetserver.nats_link": "jetserver.natslink.link",
    "jetserver.nats_connect": "jetserver.natslink.connect",
    "jetserver.nats_read": "jetserver.natslink.read",
    "jetserver.nats_fast": "jetserver.natslink.fast",
    "jetserver.nats_flush": "jetserver.natslink.flush",
    "jetserver.nats_write": "jetserver.natslink.write",
    "jetserver.shared_rounds": "jetserver.natslink.shared_rounds",
    "jetserver.fsync_runner": "jetserver.storage.fsync_runner",
    "jetserver.fsync_threads": "jetserver.storage.fsync_threads",
    "jetserver.flush_behind": "jetserver.storage.flush_behind",
    "jetserver.epoch_writes": "jetserver.storage.epoch_writes",
    "jetserver.fatal": "jetserver.storage.fatal",
    "jetserver.metrics": "jetserver.metrics.exposition",
    "jetserver.metrics_cluster": "jetserver.metrics.cluster",
    "jetserver.metrics_http": "jetserver.metrics.endpoint",
    "jetserver.hops": "jetserver.infra.hops",
    "jetserver.lazy_event": "jetserver.infra.lazy_event",
    "jetserver.runtime": "jetserver.infra.runtime",
    "jetserver.resources": "jetserver.infra.resources",
    "jetserver.gc_pause": "jetserver.broker.gc_pause",
    "jetserver.devcluster": "jetserver.testing.devcluster",
    "jetserver.demo": "jetserver.cli.demo",
    "jetserver.demo_storage": "jetserver.cli.demo_storage",
}
"""Old dotted name -> new dotted name."""

NEW_PACKAGES: dict[str, str] = {
    "jetserver.config": "The server's configuration: its sections (:mod:`.server`), how it "
    "is loaded from TOML, the\nenvironment and flags (:mod:`.load`), and the validators every "
    "package's section uses\n(:mod:`.validators`).",
    "jetserver.natslink": "The server's NATS connection (nats-py), the broker's ``NatsPort``: "
    "the link (:mod:`.link`),\nopening it (:mod:`.connect`), its read side (:mod:`.read`, "
    ":mod:`.fast`) and write side\n(:mod:`.write`, :mod:`.flush`). The wire codec is "
    ":mod:`jetserver.natsproto`.",
    "jetserver.metrics": "Server metrics: the Prometheus text exposition (:mod:`.exposition`), "
    "the metadata leader's\npartition counts (:mod:`.cluster`) and the ``GET /metrics`` "
    "endpoint (:mod:`.endpoint`).",
    "jetserver.infra": "Small process-wide primitives the server's packages share: hop marks "
    "(:mod:`.hops`), the\nlazy event (:mod:`.lazy_event`), runtime settings (:mod:`.runtime`) "
    "and operating-system\nresources (:mod:`.resources`).",
}
"""Packages this script creates, with their ``__init__`` docstring (nothing else)."""

SCOPE_DIRS = ("server/", "sdk/", "tests/", "tools/", "bench/", "spec/", "docs/", ".ci/")
SCOPE_FILES = ("noxfile.py",)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".yml", ".yaml", ".sh", ".c"}

PROSE: tuple[tuple[str, str, str], ...] = (
    (
        "ARCHITECTURE.md",
        "the shared leaves (`errors`, `logs`, `validators`, `config` and the per-package config\n"
        "sections it is made of, with `security.passwords` and `security.grants`, the entries and\n"
        "grants `[auth]` parses, `natsproto`, `hops`, `lazy_event`, `gc_pause`, `runtime`) under\n"
        "everything;",
        "the shared leaves (`errors`, `logs`, the `config` package: the server's sections, their\n"
        "loader and the validators, with the per-package config sections they are made of and\n"
        "`security.passwords` and `security.grants`, the entries and grants `[auth]` parses;\n"
        "`natsproto`; `infra`'s `hops`, `lazy_event` and `runtime`) under everything;\n"
        "`infra.resources` (open files, the data directory) just above storage;",
    ),
    (
        "ARCHITECTURE.md",
        "| `jetserver.storage`, `fsync_runner`, `flush_behind`, `epoch_writes`, `fatal` | "
        "segmented logs",
        "| `jetserver.storage` | segmented logs",
    ),
    (
        "ARCHITECTURE.md",
        "| `jetserver.server`, `nats_link`, `nats_connect`, `nats_read`, `nats_fast`, "
        "`natsproto`, `metrics*` |",
        "| `jetserver.server`, `jetserver.natslink`, `jetserver.metrics` |",
    ),
    (
        "ARCHITECTURE.md",
        "idle logs' active files parked by `idle_files`) |",
        "idle logs' active files parked by `idle_files`); where fsyncs run (`fsync_runner`: on "
        "the loop or in the worker threads of `fsync_threads`; `flush_behind`, `epoch_writes`) "
        "and the stop when a durability promise could break (`fatal`) |",
    ),
    (
        "ARCHITECTURE.md",
        "opened at startup by `nats_connect`",
        "opened at startup by `natslink.connect`",
    ),
    (
        "ARCHITECTURE.md",
        "dispatched by `nats_read.JetParser`",
        "dispatched by `natslink.read.JetParser`",
    ),
    ("ARCHITECTURE.md", "internals in `nats_fast`)", "internals in `natslink.fast`)"),
    (
        "ARCHITECTURE.md",
        "reader -> `nats_read` dispatch -> `nats_fast`",
        "reader -> `natslink.read` dispatch -> `natslink.fast`",
    ),
)
PROSE += (
    (
        "bench/bench_metrics_lib.py",
        "The same with prometheus_client is a labelled\nCounter and a labelled Histogram, each "
        "child looked up per request (``labels()``) or, the\nbest a port could do, looked up once "
        "and cached. Also one scrape of the request families.",
        "The same with\nprometheus_client is a labelled Counter and a labelled Histogram, each "
        "child looked up per\nrequest (``labels()``) or, the best a port could do, looked up once "
        "and cached. Also one\nscrape of the request families.",
    ),
    (
        "server/src/jetserver/config/load.py",
        "ServerConfig` from a TOML file, the environment and flags.",
        "ServerConfig` from a TOML file, the environment\nand flags.",
    ),
    (
        "tests/support/fsync_choice.py",
        '"""Pinning the fsync runner\'s choice of the event loop in a test '
        '(jetserver.storage.fsync_runner)."""',
        '"""Pinning the fsync runner\'s choice of the event loop in a test\n'
        '(jetserver.storage.fsync_runner)."""',
    ),
    (
        "server/src/jetserver/metrics/exposition.py",
        "the metadata leader's partition counts (metrics_cluster).",
        "the metadata leader's partition counts (metrics.cluster).",
    ),
    (
        "tests/server/test_partition_health.py",
        "(jetserver.metadata.health, metrics_cluster)",
        "(jetserver.metadata.health, jetserver.metrics.cluster)",
    ),
)
"""(file, old fragment, new fragment): the prose that names modules without their package.
A fragment not found (and its replacement not there either) is reported: edit by hand."""


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def path_of(dotted: str, *, package: bool = False) -> Path:
    base = SRC.joinpath(*dotted.split("."))
    return base / "__init__.py" if package else base.with_suffix(".py")


def children(package: str) -> set[str]:
    """Leaf names of the new modules directly inside ``package``."""
    depth = package.count(".") + 1
    return {
        new.split(".")[-1]
        for new in [*MOVES.values(), *(split[2] for split in SPLITS)]
        if new.startswith(package + ".") and new.count(".") == depth
    }


def now_packages() -> dict[str, set[str]]:
    """Old names that become packages (``jetserver.config``): name -> their new children."""
    return {
        old: children(old) for old in MOVES if any(n.startswith(old + ".") for n in MOVES.values())
    }


def move(dry_run: bool) -> list[str]:
    done = []
    for package, doc in NEW_PACKAGES.items():
        init = path_of(package, package=True)
        if not init.exists():
            done.append(f"create {init.relative_to(ROOT)}")
            if not dry_run:
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text(f'"""{doc}"""\n')
                git("add", str(init))
    for old, new in MOVES.items():
        src, dst = path_of(old), path_of(new)
        if src.exists() and dst.exists():
            raise SystemExit(f"move_modules: both {src} and {dst} exist: merge them by hand")
        if src.exists():
            done.append(f"git mv {src.relative_to(ROOT)} {dst.relative_to(ROOT)}")
            if not dry_run:
                dst.parent.mkdir(parents=True, exist_ok=True)
                git("mv", str(src), str(dst))
        elif not dst.exists():
            raise SystemExit(f"move_modules: neither {src} nor {dst} exists")
    return done


def scope() -> list[Path]:
    out = []
    for name in git("ls-files").splitlines():
        path = ROOT / name
        if name == ME or not path.is_file():
            continue
        top_md = name.endswith(".md")
        pyproject = Path(name).name.startswith("pyproject") and name.endswith(".toml")
        in_dirs = name.startswith(SCOPE_DIRS) and (
            path.suffix in TEXT_SUFFIXES or name.startswith(".ci/")
        )
        if top_md or pyproject or in_dirs or name in SCOPE_FILES:
            out.append(path)
    return out


def split_from_imports(text: str) -> str:
    """``from jetserver import a, hops`` -> ``from jetserver import a`` and ``from
    jetserver.infra import hops`` (a renamed module keeps its local name with ``as``)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.module == "jetserver" and not node.level):
            continue
        moved = [a for a in node.names if f"jetserver.{a.name}" in MOVES]
        if not moved:
            continue
        kept = [a for a in node.names if a not in moved]
        groups: dict[str, list[str]] = {}
        for alias in moved:
            parent, _, leaf = MOVES[f"jetserver.{alias.name}"].rpartition(".")
            local = alias.asname or alias.name
            groups.setdefault(parent, []).append(leaf if leaf == local else f"{leaf} as {local}")
        pad = " " * node.col_offset
        end = node.end_lineno or node.lineno
        last = lines[end - 1]
        tail = last[node.end_col_offset :].rstrip("\n")
        stmts = []
        if kept:
            names = ", ".join(a.name if not a.asname else f"{a.name} as {a.asname}" for a in kept)
            stmts.append(f"{pad}from jetserver import {names}")
        stmts += [
            f"{pad}from {parent} import {', '.join(names)}" for parent, names in groups.items()
        ]
        stmts[0] += tail
        edits.append((node.lineno - 1, node.end_lineno or node.lineno, "\n".join(stmts) + "\n"))
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = [new]
    return "".join(lines)


def split_text_imports(text: str) -> str:
    """The one-line ``from jetserver import x`` statements that :func:`split_from_imports`
    does not see: in strings (a ``python -c`` script) and docs."""

    def one(match: re.Match[str]) -> str:
        pad, body = match.group(1), match.group(2).strip()
        names = [name.split(" as ")[0].strip() for name in body.split(",")]
        if not any(f"jetserver.{name}" in MOVES for name in names):
            return match.group(0)
        lines = split_from_imports(f"from jetserver import {body}\n").splitlines()
        return "\n".join(pad + line for line in lines)

    return re.sub(r"(?m)^([ \t]*)from jetserver import ([\w ,]+?)[ \t]*$", one, text)


def dotted_pattern() -> re.Pattern[str]:
    leaves = sorted((old.split(".", 1)[1] for old in MOVES), key=len, reverse=True)
    return re.compile(r"(?<![\w.])jetserver\.(" + "|".join(leaves) + r")(?!\w)")


def rewrite_dotted(text: str) -> str:
    packages = now_packages()

    def one(match: re.Match[str]) -> str:
        old = f"jetserver.{match.group(1)}"
        if old in packages:
            after = match.string[match.end() :]
            name = re.match(r"\.(\w+)", after) or re.match(r"\s+import\s+\(?\s*(\w+)", after)
            if not name or name.group(1) in packages[old]:
                return match.group(0)  # the package itself, or one of its new modules
        return MOVES[old]

    return dotted_pattern().sub(one, text)


def rewrite_paths(text: str, unique: set[str]) -> str:
    for old, new in MOVES.items():
        old_rel, new_rel = old.replace(".", "/"), new.replace(".", "/")
        text = re.sub(rf"(?<![\w.]){re.escape(old_rel)}\.py\b", f"{new_rel}.py", text)
        leaf = old.rsplit(".", 1)[1]
        if leaf in unique:
            in_pkg = new_rel.split("/", 1)[1]
            text = re.sub(rf"(?<![\w./-]){re.escape(leaf)}\.py\b", f"{in_pkg}.py", text)
        if leaf != new.rsplit(".", 1)[1] and old not in now_packages():  # prose: nats_fast.X
            in_pkg = new.split(".", 1)[1]
            text = re.sub(
                rf"(?<![\w./]){re.escape(leaf)}\.(?!py\b)(?=[A-Za-z_])", f"{in_pkg}.", text
            )
    return text


def unique_leaves() -> set[str]:
    """Old module leaves whose file name ``leaf.py`` names no other tracked file."""
    names: dict[str, int] = {}
    for name in git("ls-files").splitlines():
        base = Path(name).name
        names[base] = names.get(base, 0) + 1
    out = set()
    for old, new in MOVES.items():
        leaf, new_leaf = old.rsplit(".", 1)[1], new.rsplit(".", 1)[1]
        own = 1 if leaf == new_leaf else 0  # the module itself, at its old or new place
        if names.get(f"{leaf}.py", 0) <= own:
            out.add(leaf)
    return out


def collapse_layers(text: str) -> str:
    """In check_layers.py's LAYERS: one entry per new package (in the lowest layer that
    names its modules; entries in higher layers stay, the longest prefix wins) and no entry
    that another entry of the same layer already covers."""
    tree = ast.parse(text)
    layers: list[list[tuple[str, int]]] = []
    for node in tree.body:
        if not (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "LAYERS"
            and isinstance(node.value, ast.Tuple)
        ):
            continue
        for entry in node.value.elts:
            assert isinstance(entry, ast.Tuple)
            prefixes = entry.elts[1]
            assert isinstance(prefixes, ast.Tuple)
            layers.append(
                [(str(c.value), c.lineno) for c in prefixes.elts if isinstance(c, ast.Constant)]
            )
    renames: dict[str, str] = {}
    removals: set[str] = set()
    placed = {name for layer in layers for name, _ in layer}
    for package in (*NEW_PACKAGES, *now_packages()):
        for layer in layers:
            inside = [name for name, _ in layer if name.startswith(package + ".")]
            if inside and package not in placed:
                renames[inside[0]] = package
                removals.update(inside[1:])
                placed.add(package)
            elif inside and package in {n for n, _ in layer}:
                removals.update(inside)
    moved = set(MOVES.values())
    for name in moved & placed:  # into an existing package: it takes that package's layer
        parent = name.rpartition(".")[0]
        if parent not in NEW_PACKAGES and parent in placed:
            removals.add(name)
    for layer in layers:
        names = [renames.get(n, n) for n, _ in layer if n != "jetserver"]
        for name, _ in layer:
            covered = any(name.startswith(other + ".") for other in names if other != name)
            if name in moved and covered:
                removals.add(name)
    for old, new in renames.items():
        text = text.replace(f'"{old}"', f'"{new}"', 1)
    for name in removals:
        text = re.sub(rf'\n[ \t]*"{re.escape(name)}",[^\n]*(?=\n)', "", text)
        text = re.sub(rf',\s*"{re.escape(name)}"(?=[,)])', "", text)
        text = re.sub(rf'"{re.escape(name)}",\s*', "", text)
    return re.sub(r'\(\s*("jetserver[\w.]*")\s*\)', r"(\1,)", text)  # a one-name tuple


def prose(dry_run: bool) -> list[str]:
    missing = []
    for name, old, new in PROSE:
        path = ROOT / name
        text = path.read_text()
        if old in text:
            if not dry_run:
                path.write_text(text.replace(old, new))
        elif new not in text:
            missing.append(f"{name}: not found, edit by hand: {old!r} -> {new!r}")
    return missing


def leftovers() -> list[str]:
    renamed = [
        old.rsplit(".", 1)[1]
        for old, new in MOVES.items()
        if old.rsplit(".", 1)[1] != new.rsplit(".", 1)[1] and old not in now_packages()
    ]
    pattern = re.compile(r"(?<![\w/])(" + "|".join(renamed) + r")(?![\w])")
    out = []
    for path in scope():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                out.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:110]}")
    return out


SPLITS: tuple[tuple[str, str, str, str], ...] = (
    (
        "jetserver.config.server",
        "# [cluster]",
        "jetserver.config.cluster",
        "The ``[cluster]`` section of the server's configuration: membership, Raft timings, the\n"
        'cluster password (spec/cluster.md, "Cluster configuration").',
    ),
)
"""(module, the ``# [section]`` marker of a block between two ``# ----`` rulers, new module,
its docstring): a section that goes to a module of its own, with the names it defines (the
configuration was 599 lines before its new, longer import names)."""


def split_section(module: str, marker: str, new: str, doc: str) -> None:
    """Cut the block under ``marker`` out of ``module`` into ``new`` (once), with the
    imports it uses; ``module`` imports back the names it still uses."""
    src, dst = path_of(module), path_of(new)
    if dst.exists() or not src.exists():
        return
    lines = src.read_text().splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.rstrip() == marker), None)
    if at is None:
        raise SystemExit(f"move_modules: no {marker!r} in {src}: split it by hand")
    end = next(i for i in range(at + 1, len(lines)) if lines[i].startswith("# ----"))
    block, rest = "".join(lines[at + 1 : end]), lines[: at - 1] + lines[end:]
    tree = ast.parse("".join(lines))
    used = set(re.findall(r"\b\w+\b", block))
    defined = sorted(defined_names(block))
    shared = []  # module-level values the block uses (``_positive = positive()``): copied
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.lineno - 1 < at - 1:
            targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
            if targets & used:
                segment = ast.get_source_segment("".join(lines), node) or ""
                shared.append(segment)
                used |= set(re.findall(r"\b\w+\b", segment))
    if shared:
        block = "\n".join(shared) + "\n\n" + block
    imports = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [a for a in node.names if (a.asname or a.name) in used]
            if names:
                spelled = ", ".join(
                    a.name if not a.asname else f"{a.name} as {a.asname}" for a in names
                )
                imports.append(f"from {node.module} import {spelled}")
        elif isinstance(node, ast.Import):
            imports += [f"import {a.name}" for a in node.names if (a.asname or a.name) in used]
    remaining = "".join(rest)
    back = [name for name in defined if re.search(rf"\b{name}\b", remaining)]
    dst.write_text(
        f'"""{doc}"""\n\nfrom __future__ import annotations\n\n'
        + "\n".join(imports)
        + "\n\n"
        + block
    )
    first = next(i for i, line in enumerate(rest) if line.startswith("from jetserver."))
    if back:
        rest.insert(first, f"from {new} import {', '.join(back)}\n")
    src.write_text("".join(rest))
    git("add", str(dst))


def defined_names(code: str) -> set[str]:
    out = set()
    for node in ast.parse(code).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def move_names(text: str) -> str:
    """Importers of a split-off section's names import them from its new module."""
    for module, _marker, new, _doc in SPLITS:
        if not path_of(new).exists():
            continue
        names = {n for n in defined_names(path_of(new).read_text()) if not n.startswith("_")}
        text = re.sub(rf"(?<![\w.]){re.escape(module)}\.({'|'.join(names)})\b", rf"{new}.\1", text)
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines(keepends=True)
        edits = []
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.module == module):
                continue
            going = [a for a in node.names if a.name in names]
            if not going or path_of(module) == path_of(new):
                continue
            staying = [a for a in node.names if a not in going]
            pad = " " * node.col_offset

            def spell(aliases: list[ast.alias]) -> str:
                return ", ".join(
                    a.name if not a.asname else f"{a.name} as {a.asname}" for a in aliases
                )

            stmts = [f"{pad}from {new} import {spell(going)}"]
            if staying:
                stmts.insert(0, f"{pad}from {module} import {spell(staying)}")
            edits.append((node.lineno - 1, node.end_lineno or node.lineno, "\n".join(stmts) + "\n"))
        for start, end, new_text in sorted(edits, reverse=True):
            lines[start:end] = [new_text]
        text = "".join(lines)
    return text


def main(argv: list[str]) -> int:
    dry_run = "--dry-run" in argv
    if git("status", "--porcelain").strip():
        print("move_modules: the tree is dirty: commit or stash first", file=sys.stderr)
        return 1
    for line in move(dry_run):
        print(line)
    if dry_run:
        return 0
    for split in SPLITS:
        split_section(*split)
    unique = unique_leaves()
    changed = []
    for path in scope():
        text = path.read_text()
        new = split_from_imports(text) if path.suffix == ".py" else text
        new = split_text_imports(new)
        new = rewrite_paths(rewrite_dotted(new), unique)
        new = move_names(new)
        if path.as_posix().endswith("tools/check_layers.py"):
            new = collapse_layers(new)
        if new != text:
            path.write_text(new)
            changed.append(path)
    missing = prose(dry_run)
    print(f"rewrote {len(changed)} files")
    py = [str(p) for p in changed if p.suffix == ".py"] + [
        str(path_of(p, package=True)) for p in NEW_PACKAGES
    ]
    ruff = [sys.executable, "-m", "ruff"]
    halves = [str(path_of(name)) for module, _, new, _ in SPLITS for name in (module, new)]
    subprocess.run(
        [*ruff, "check", "--select", "F401", "--fix", "-q", *halves], cwd=ROOT, check=False
    )
    py += halves
    subprocess.run([*ruff, "check", "--select", "I", "--fix", "-q", *py], cwd=ROOT, check=False)
    subprocess.run([*ruff, "format", "-q", *py], cwd=ROOT, check=False)
    for line in missing:
        print(line)
    left = leftovers()
    if left:
        print(f"{len(left)} mentions of renamed module names left (read them):")
        print("\n".join(left))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
