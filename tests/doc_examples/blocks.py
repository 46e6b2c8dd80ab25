"""Fenced code blocks of the README and the docs, with the marker written before each.

The convention (enforced by tests/doc_examples/test_doc_examples.py): every ``python``, ``sh`` or
``js`` block (and their aliases, :data:`RUNNABLE`) runs as printed against ``jet dev``,
unless the line right before its opening fence is one of

- ``<!-- fragment: WHY -->``: part of a program, or a command that cannot run in a test
  (installs, runs until Ctrl-C, fixed ports); the reason is required;
- ``<!-- tested-by: PATH -->``: another test runs it (the file at PATH, relative to the
  repository, names the block's heading).

Blocks in other languages (``text``, ``toml``, ``json``, none) are not run.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
"""The repository."""


def _site_pages() -> list[Path]:
    """The site's pages under docs/ in the order of mkdocs.yml's nav (a reader's order),
    then any others."""
    nav = re.findall(
        r"^\s*-\s*(?:[^:\n]+:\s*)?(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M
    )
    listed = [ROOT / "docs" / name for name in nav if (ROOT / "docs" / name).is_file()]
    return listed + sorted(set((ROOT / "docs").rglob("*.md")) - set(listed))


DOCUMENTS = [ROOT / "README.md", *_site_pages(), *sorted((ROOT / "spec").glob("*.md"))]
"""Every Markdown file whose blocks are checked, in reading order: the README, the site's
pages and the spec (which the site renders)."""
RUNNABLE = {
    "python": "python",
    "py": "python",
    "sh": "sh",
    "bash": "sh",
    "shell": "sh",
    "console": "sh",
    "js": "js",
    "javascript": "js",
    "node": "js",
}
"""Fence languages whose blocks must run or be marked, and how each is run."""

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^\s`]*)")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>fragment|tested-by)\s*(?::\s*(?P<note>.*?))?\s*-->\s*$")
_COMMENT = re.compile(r"^\s*<!--.*-->\s*$")


class MarkerError(ValueError):
    """A marker that does not follow the convention."""


@attrs.frozen
class Block:
    """One fenced code block."""

    path: Path
    """The Markdown file."""
    line: int
    """Line number (1-based) of the opening fence."""
    language: str
    """The fence's info string (first word), lower case; empty if none."""
    code: str
    """The block's text, its indentation removed."""
    headings: tuple[str, ...]
    """The headings it is under, outermost first (without the ``#``)."""
    marker: str | None
    """``fragment``, ``tested-by`` or None."""
    note: str
    """The marker's text after the colon."""

    @property
    def kind(self) -> str | None:
        """How it is run (:data:`RUNNABLE`), or None for a block that is not code to run."""
        return RUNNABLE.get(self.language)

    @property
    def name(self) -> str:
        """``README.md:174`` (relative to the repository)."""
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` in order.

    Raises:
        MarkerError: a comment right before a fence that looks like a marker but is not one,
            a fragment without a reason, or a fence left open.
    """
    lines = path.read_text().splitlines()
    found: list[Block] = []
    headings: list[tuple[int, str]] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        heading = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if heading:
            level = len(heading.group(1))
            headings = [h for h in headings if h[0] < level] + [(level, heading.group(2))]
        fence = _FENCE.match(line)
        if fence is None:
            index += 1
            continue
        indent, mark = fence.group("indent"), fence.group("fence")
        start = index
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(mark):
            text = lines[index]
            body.append(text[len(indent) :] if text.startswith(indent) else text.lstrip())
            index += 1
        if index >= len(lines):
            raise MarkerError(f"{path}:{start + 1}: a fence left open")
        marker, note = _marker_before(path, lines, start)
        found.append(
            Block(
                path=path,
                line=start + 1,
                language=fence.group("info").lower(),
                code="\n".join(body) + "\n",
                headings=tuple(h[1] for h in headings),
                marker=marker,
                note=note,
            )
        )
        index += 1
    return found


def _marker_before(path: Path, lines: list[str], fence_index: int) -> tuple[str | None, str]:
    before = fence_index - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    if before < 0 or not _COMMENT.match(lines[before]):
        return None, ""
    text = lines[before]
    if not re.search(r"fragment|tested-by", text):
        return None, ""
    match = _MARKER.match(text)
    if match is None:
        raise MarkerError(f"{path}:{before + 1}: not a marker: {text.strip()}")
    kind, note = match.group("kind"), (match.group("note") or "").strip()
    if not note:
        raise MarkerError(f"{path}:{before + 1}: `{kind}` needs a reason or a path after ':'")
    return kind, note


def all_blocks() -> list[Block]:
    """The blocks of every file in :data:`DOCUMENTS`, in that order."""
    return [block for path in DOCUMENTS for block in blocks(path)]
