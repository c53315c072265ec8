"""How many tests each tier runs, per marker and per directory, for docs/testing.md.

`python -m tests.counts` prints the block; `python -m tests.counts --write` puts it between the `counts:begin`
and `counts:end` lines of docs/testing.md (tests/test_docs_counts.py checks that it is current). The tests are
counted as pytest collects them (parametrized cases each count), in this process, with tests/conftest.py
setting its markers; `make check`'s selection is the Makefile's `FAST` expression, read from the Makefile,
and pytest's `-m` applies it.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "testing.md"
BEGIN = "<!-- counts:begin (python -m tests.counts --write) -->"
END = "<!-- counts:end -->"
MARKERS = ("cluster", "spark", "root", "fuzz", "sweep", "smoke", "slow")


def fast_expression() -> str:
    """The `-m` expression of `make check`: the Makefile's `FAST :=` line."""
    match = re.search(r"^FAST\s*:=\s*(.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit("Makefile: no `FAST :=` line")
    return match.group(1).strip()


class Recorder:
    """A pytest plugin: the items `-m` keeps, those it deselects, and modules skipped while collected."""

    def __init__(self) -> None:
        self.selected: list[pytest.Item] = []
        self.deselected: list[pytest.Item] = []
        self.skipped: list[str] = []

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected.extend(items)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:
            self.skipped.append(report.nodeid)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.selected = list(session.items)


def collect(expression: str) -> Recorder:
    recorder = Recorder()
    args = ["--collect-only", "-q", "-p", "no:cacheprovider", "-m", expression, str(ROOT / "tests")]
    os.environ.pop("PYTEST_ADDOPTS", None)  # options of the caller's run would change what is collected
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = pytest.main(args, plugins=[recorder])
    if code != 0 or recorder.skipped:
        sys.stderr.write(out.getvalue())
        raise SystemExit(f"collection failed (exit {code}; skipped: {', '.join(recorder.skipped) or 'none'})")
    return recorder


def directory(item: pytest.Item) -> str:
    parts = item.path.relative_to(ROOT / "tests").parts
    return f"`tests/{parts[0]}/`" if len(parts) > 1 else "`tests/*.py` (top level)"


def block() -> str:
    fast = fast_expression()
    recorder = collect(fast)
    items = recorder.selected + recorder.deselected
    in_check = {item.nodeid for item in recorder.selected}
    lines = [
        "| tier | tests |",
        "|---|---|",
        f'| `make check` (`-m "{fast}"`) | {len(in_check)} |',
        f"| `make test` (all) | {len(items)} |",
        "",
        "| marker | tests | of them in `make check` |",
        "|---|---|---|",
    ]
    for name in MARKERS:
        marked = [item.nodeid for item in items if item.get_closest_marker(name)]
        lines.append(f"| `{name}` | {len(marked)} | {len(in_check.intersection(marked))} |")
    lines += ["", "| directory | tests | of them in `make check` |", "|---|---|---|"]
    total = Counter(directory(item) for item in items)
    check = Counter(directory(item) for item in recorder.selected)
    lines += [f"| {name} | {total[name]} | {check[name]} |" for name in sorted(total)]
    return "\n".join(lines) + "\n"


def write(text: str) -> None:
    doc = DOC.read_text()
    start, end = doc.index(BEGIN) + len(BEGIN) + 1, doc.index(END)
    DOC.write_text(doc[:start] + text + doc[end:])


def main(argv: list[str]) -> None:
    if argv not in ([], ["--write"]):
        raise SystemExit("usage: python -m tests.counts [--write]")
    text = block()
    if argv:
        write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
