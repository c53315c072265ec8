"""The coverage-guided fuzzers (fuzz/targets.py, atheris) run a bounded number of inputs each, from the
checked-in corpus: 4 × 25,000 = 100,000 inputs a run. Any exception but a decoder's own refusal, a crash
or a hang fails the test, with the input libFuzzer kept for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
RUNS = 25_000


@pytest.mark.parametrize("target", ["frames", "bodies", "entries", "hello"])
def test_fuzz_target(target: str, tmp_path: Path) -> None:
    found = tmp_path / "found"  # new inputs go here: the checked-in corpus is only read
    found.mkdir()
    done = subprocess.run([sys.executable, str(FUZZ / "targets.py"), target, f"-runs={RUNS}", "-timeout=10",
                           "-rss_limit_mb=1024", f"-artifact_prefix={tmp_path}/", str(found),
                           str(FUZZ / "corpus" / target)], capture_output=True, text=True, timeout=600)
    crashes = [p.name for p in tmp_path.iterdir() if p.is_file()]
    assert done.returncode == 0 and not crashes, f"{crashes}\n{done.stderr[-4000:]}"
    assert f"Done {RUNS} runs" in done.stderr


def test_a_peer_frame_of_an_unknown_op_is_a_protocol_error() -> None:
    """Found by the bodies target: the refusal's message named the op through Op(), which raised
    ValueError for an op number without a name."""
    from quorumlog.net.errors import ProtocolError
    from quorumlog.net.frames import ONEWAY, Frame
    from quorumlog.server.codec import decode_message

    with pytest.raises(ProtocolError, match="op#0"):
        decode_message(Frame(ONEWAY, 0, 0, memoryview(b"")))
