"""MkDocs hooks of the docs site (mkdocs.yml): render the specification without a copy in git.

``spec/*.md`` become the pages ``spec/*.md`` of the site and ``spec/vectors/*`` its files, read
from spec/ at build time, so the spec's own relative links (``envelope.md``,
``vectors/protocol.json``) work unchanged. A link to the folder ``vectors/`` becomes a link to
a generated page listing the vector files.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

SPEC = Path(__file__).resolve().parent.parent / "spec"
VECTORS_PAGE = "spec/vectors/index.md"


def on_files(files: Files, config: Any) -> Files:
    """Add the spec's pages, its vector files and a page listing the vectors."""
    for path in sorted(SPEC.glob("*.md")):
        files.append(File.generated(config, f"spec/{path.name}", abs_src_path=str(path)))
    vectors = sorted(p for p in (SPEC / "vectors").iterdir() if p.is_file())
    for path in vectors:
        files.append(File.generated(config, f"spec/vectors/{path.name}", abs_src_path=str(path)))
    listing = "\n".join(f"- [{p.name}]({p.name})" for p in vectors)
    files.append(
        File.generated(
            config,
            VECTORS_PAGE,
            content=f"# Test vectors\n\nByte-exact vectors of the specification:\n\n{listing}\n",
        )
    )
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """In the spec, a link to the folder ``vectors/`` points at the generated listing."""
    if page.file.src_uri.startswith("spec/"):
        markdown = re.sub(r"\]\(vectors/\)", "](vectors/index.md)", markdown)
    return markdown
