"""The block reader behind the docs examples test: what counts as marked, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from doc_examples.blocks import MarkerError, blocks

PAGE = """# Page

## Run

```python
print("runs")
```

<!-- fragment: the arguments only -->

```python
Client(servers, tls_ca="ca.pem")
```

<!-- a plain comment -->
```sh
jet stream list
```

- a list item:

    ```js
    console.log("indented");
    ```

```toml
[server]
```
"""


def test_blocks_their_markers_and_headings(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    found = blocks(page)
    assert [(b.language, b.kind, b.marker) for b in found] == [
        ("python", "python", None),
        ("python", "python", "fragment"),
        ("sh", "sh", None),
        ("js", "js", None),
        ("toml", None, None),
    ]
    assert found[0].code == 'print("runs")\n'
    assert found[0].headings == ("Page", "Run")
    assert found[1].note == "the arguments only"
    assert found[3].code == 'console.log("indented");\n'


@pytest.mark.parametrize(
    "marker",
    ["<!-- fragment -->", "<!-- fragment: -->", "<!-- tested-by -->", "<!-- fragmant: x -->"],
)
def test_a_marker_without_a_reason_or_misspelt_is_refused(tmp_path: Path, marker: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"{marker}\n```python\nprint(1)\n```\n")
    if "fragmant" in marker:  # not a marker at all: the block is run, as an unmarked one
        assert blocks(page)[0].marker is None
        return
    with pytest.raises(MarkerError):
        blocks(page)


def test_an_open_fence_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```python\nprint(1)\n")
    with pytest.raises(MarkerError, match="left open"):
        blocks(page)
