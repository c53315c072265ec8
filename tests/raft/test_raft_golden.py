"""Golden-file Raft scenarios (etcd-io/raft's datadriven testdata, kept simple): each file under
testdata/ is a scripted cluster run whose transcript must match the file. Regenerate the expected
output with `QUORUMLOG_REWRITE=1 pytest tests/raft/test_raft_golden.py` or
`python -m quorumlog.sim.scenario --rewrite tests/raft/testdata/*.txt`, then read the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quorumlog.sim.scenario import check

TESTDATA = Path(__file__).parent / "testdata"
FILES = sorted(TESTDATA.glob("*.txt"))


def test_testdata_present() -> None:
    assert FILES, f"no scenarios under {TESTDATA}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden_scenario(path: Path) -> None:
    diff = check(path, rewrite=os.environ.get("QUORUMLOG_REWRITE") == "1")
    if diff:
        pytest.fail(f"{path.name} differs from its golden output "
                    f"(QUORUMLOG_REWRITE=1 to regenerate):\n{diff}", pytrace=False)
