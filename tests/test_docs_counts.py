"""docs/testing.md's test counts are what `python -m tests.counts` generates from the suite as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- counts:begin (python -m tests.counts --write) -->\n"
END = "<!-- counts:end -->"


def test_the_test_counts_in_docs_testing_md_are_current() -> None:
    run = subprocess.run([sys.executable, "-m", "tests.counts"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    doc = (ROOT / "docs" / "testing.md").read_text()
    assert BEGIN in doc and END in doc, "docs/testing.md has lost its counts:begin/counts:end lines"
    written = doc.split(BEGIN, 1)[1].split(END, 1)[0]
    assert written == run.stdout, "docs/testing.md's test counts are stale: run `python -m tests.counts --write`"
