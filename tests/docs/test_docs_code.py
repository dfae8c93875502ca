"""The ```python blocks of each document in docs/ run, in order, in one namespace per document, in
a temporary working directory: the docs show code that works against this tree, and their asserts
hold. Blocks fenced as ```bash or ```text are not run."""

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md"))
# An opening fence ```python at the start of a line, the code, and the closing fence.
PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def python_blocks(text: str):
    """(line number, code) of each ```python block of a Markdown text."""
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in PYTHON_BLOCK.finditer(text)]


def test_block_extraction():
    text = "intro\n```python\nx = 1\n```\n```bash\nls\n```\n```python\ny = x + 1\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (9, "y = x + 1\n")]


def test_docs_exist():
    assert {p.name for p in DOCS} >= {"architecture.md", "user_guide.md"}


@pytest.mark.parametrize("path", DOCS, ids=[p.stem for p in DOCS])
def test_doc_code_runs(path: pathlib.Path, tmp_path: pathlib.Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(path.read_text())
    assert blocks, f"{path.name} has no python blocks"
    namespace = {"__name__": f"docs_{path.stem}"}
    for line, code in blocks:
        # Compiled with the document's name and line, so a failure points into the document.
        exec(compile("\n" * (line - 1) + code, str(path), "exec"), namespace)
