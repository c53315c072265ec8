"""Citations of docs/design.md name sections it has.

Code comments, docstrings, tests and docs cite the design as "docs/design.md" followed by a section sign
and the section's number (several may follow one another: "§1, §4"). Each number must be a `## N.` heading
of docs/design.md. The architecture note the code used to cite lived outside the repository; none of its
bare citations (the word DESIGN in capitals followed by a section sign or a pilcrow, or the note's file
name) may remain.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
SCANNED = ("src", "tests", "docs", "benchmarks", "README.md")
SKIPPED_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}

HEADING = re.compile(r"^## (\d+)\. \S", re.MULTILINE)
# "docs/design.md §4", "docs/design.md §1, §4", "docs/design.md §4 and §7", and as a Markdown link,
# "[docs/design.md](docs/design.md) §1"
CITATION = re.compile(r"docs/design\.md(?:\]\([^)\s]*\)|\))?\s+(§\d+(?:\s*(?:,|and|or)\s*§\d+)*)")
NUMBER = re.compile(r"§(\d+)")
OLD_CITATION = re.compile(r"\bDESIGN(?:\s*[§¶]|\.md\b)")


def _text_files() -> Iterator[Path]:
    for name in SCANNED:
        top = ROOT / name
        if top.is_file():
            yield top
            continue
        if not top.is_dir():
            continue
        for path in sorted(top.rglob("*")):
            if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts):
                yield path


def _lines() -> Iterator[tuple[Path, int, str]]:
    """Every line of every text file scanned (binary files, such as images and built extensions, are left
    out)."""
    for path in _text_files():
        raw = path.read_bytes()
        if b"\0" in raw:
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            yield path, lineno, line


def _sections() -> set[int]:
    return {int(n) for n in HEADING.findall(DESIGN.read_text())}


def _where(path: Path, lineno: int) -> str:
    return f"{path.relative_to(ROOT)}:{lineno}"


def test_design_has_numbered_sections() -> None:
    numbers = [int(n) for n in HEADING.findall(DESIGN.read_text())]
    assert numbers, "docs/design.md has no '## N. ...' headings"
    assert len(numbers) == len(set(numbers)), f"docs/design.md numbers a section twice: {numbers}"


def test_every_citation_names_an_existing_section() -> None:
    sections = _sections()
    found = 0
    missing = []
    for path, lineno, line in _lines():
        for m in CITATION.finditer(line):
            for n in NUMBER.findall(m.group(1)):
                found += 1
                if int(n) not in sections:
                    missing.append(f"{_where(path, lineno)}: §{n}")
    assert found, "no citation of docs/design.md found: is the scan looking in the right places?"
    assert not missing, f"docs/design.md has no such section (it has {sorted(sections)}): {missing}"


def test_no_citation_of_the_old_design_note_remains() -> None:
    left = [f"{_where(path, lineno)}: {line.strip()}" for path, lineno, line in _lines()
            if path != DESIGN and OLD_CITATION.search(line)]
    assert not left, f"cite docs/design.md instead: {left}"
