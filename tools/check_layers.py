"""The import-direction check of ``nox -s lint``: the server's layers (ARCHITECTURE.md,
"Packages and layers") point one way.

Each module of ``jetserver`` is in the layer of the longest prefix in :data:`LAYERS`; a
module may import its own layer and those below, never one above. Every import counts:
module level, inside functions and under ``TYPE_CHECKING`` (a type is a dependency too).
``jetsdk`` and third-party packages are outside the contract (the server builds on both).

    python tools/check_layers.py             # exit 1 on a violation not in KNOWN, or on a
                                             # KNOWN one that is gone (shrink the list)
    python tools/check_layers.py --strict    # every violation, KNOWN ones too
    python tools/check_layers.py --list      # print the violations, by layer pair

:data:`KNOWN` lists today's violations (importer, imported), each to be removed as it is
fixed: a new arrow the wrong way fails the lint session at once.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "server" / "src"
PACKAGE = "jetserver"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "base",
        (
            "jetserver",  # the package itself (its __init__ exports the version)
            "jetserver.errors",
            "jetserver.logs",
            "jetserver.infra",
            "jetserver.natsproto",
            "jetserver.config",
            "jetserver.replication.config",
            "jetserver.security.config",
            "jetserver.security.passwords",
            "jetserver.security.grants",
            "jetserver.storage.config",
            "jetserver.raft.config",
        ),
    ),
    (
        "storage",
        ("jetserver.storage",),
    ),
    ("resources", ("jetserver.infra.resources",)),
    ("metadata", ("jetserver.metadata",)),
    ("peer", ("jetserver.security.peer",)),
    ("replication", ("jetserver.replication",)),
    ("broker", ("jetserver.broker",)),
    ("raft, cluster", ("jetserver.raft", "jetserver.cluster")),
    ("protocol", ("jetserver.protocol",)),
    (
        "server",
        (
            "jetserver.security",
            "jetserver.natslink",
            "jetserver.metrics",
            "jetserver.server",
        ),
    ),
    ("test kit", ("jetserver.testing",)),
    ("tools", ("jetserver.observe", "jetserver.console")),
    ("cli", ("jetserver.cli",)),
)
"""Layers from the bottom up: (name, module prefixes). Where ARCHITECTURE.md's table is
silent: the shared leaves (errors, logs, config and the per-package config sections the
server's config is made of, with the password entries and grants its ``[auth]`` section
parses) are
the base; security's peer dialing (``security.peer``, the
client side every server-to-server caller uses) sits below replication, the rest of
security (the request gate, TLS, wiring) with the server's assembly; the tools, which use
the SDK only, below the CLI that runs them."""

KNOWN: frozenset[tuple[str, str]] = frozenset()
"""Tolerated violations, (importer, imported) modules: none left (the last 12 went in
issue 37's second pass: the broker's NATS port, protocol's gate port, StreamInfo and the
UpdateStream op below the cluster). A new one is fixed, not listed."""


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` of the longest prefix of ``module``."""
    best, best_len = -1, -1
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best < 0:
        raise SystemExit(f"check_layers: {module} is in no layer: add it to LAYERS")
    return best


def modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    found: dict[str, Path] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports (the longest existing module name of
    each import: ``from jetserver.broker import partition`` is jetserver.broker.partition)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name.startswith(PACKAGE) and name != module:
                out.add(name)
                break
    return out


def violations() -> list[tuple[str, str]]:
    """(importer, imported) pairs where the imported module is in a higher layer."""
    known = modules()
    found = []
    for module, path in known.items():
        mine = layer_of(module)
        for target in sorted(imports(module, path, known)):
            if layer_of(target) > mine:
                found.append((module, target))
    return sorted(found)


def main(argv: list[str]) -> int:
    found = violations()
    if "--list" in argv:
        for importer, imported in found:
            low, high = LAYERS[layer_of(importer)][0], LAYERS[layer_of(imported)][0]
            print(f"{importer} ({low}) -> {imported} ({high})")
        print(f"{len(found)} imports against the layers")
        return 0
    strict = "--strict" in argv
    new = [pair for pair in found if strict or pair not in KNOWN]
    gone = [] if strict else sorted(KNOWN - set(found))
    for importer, imported in new:
        low, high = LAYERS[layer_of(importer)][0], LAYERS[layer_of(imported)][0]
        print(f"{importer} ({low}) imports {imported} ({high}): a layer above its own")
    for importer, imported in gone:
        print(f"{importer} -> {imported} is fixed: remove it from KNOWN in {__file__}")
    if new or gone:
        print("layers: ARCHITECTURE.md, 'Packages and layers'; contract: LAYERS in this file")
        return 1
    print(f"layers point one way ({len(KNOWN)} known exceptions left)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
