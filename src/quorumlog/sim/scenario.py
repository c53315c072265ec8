"""Golden-file scenarios over `Script`, in the spirit of etcd-io/raft's datadriven `testdata/*.txt`.

A file is a series of blocks separated by blank lines. Each block is optional `#` comment lines, one
command line, a `----` line, then the output the command produced: the transcript lines appended while
it ran, plus whatever the command prints itself (`status`, `log`, `expire`). Commands take `key=value`
arguments:

    cluster nodes=n0,n1,n2 [bootstrapped=false] [segment=4096] [log.n1=1,1,4 vote=7] [members=n0,n1]
            [prevote=false] [lease=false]
    elect n0 [drop=n2]              tick n0 ms=100 | tick all ms=100
    propose n0 count=3 [size=N]     deliver [drop=n2]      settle [drop=n2]
    run ms=500 [drop=n2] [show=Push,Vote]                  flush n0          restart n1      wipe n1
    expire n0 [member_timeout=ms]   status n0 [n1 ...]     log n0 [n1 ...]
    change n0 add|promote|remove n3 [address=host:port]    config n0 [n1 ...]

`members` are the group's first configuration (default: every node); the others are spares that join.
`change` asks a node for a membership change (raft/reconfig.py); `config` prints the configuration each
node follows. `prevote=false lease=false` turn pre-vote and check-quorum off (Raft as the paper has it).

`drop=a,b` drops every message to or from those nodes. `log.<node>=t,t,...` starts that node with one
entry per term listed, and `vote=T` starts every node in term T. `run` prints only role changes and
completions and the lines containing one of the `show` substrings (heartbeats would swamp the file); the
other driving commands print every transcript line unless given `show` too.

    python -m quorumlog.sim.scenario [--rewrite] FILE...

checks the files (printing a unified diff per mismatch), or with `--rewrite` replaces each expected
output by the actual one.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import StoreConfig
from ..entry import decode_header
from ..raft.membership import Membership
from ..raft.messages import Message
from ..store.base import LogStore
from .script import SCRIPT_RAFT, Script, store_with_terms

SEPARATOR = "----"


class ScenarioError(Exception):
    pass


@dataclass
class Block:
    comments: list[str]
    command: str
    expected: list[str]
    line: int  # 1-based line number of the command
    actual: list[str] = field(default_factory=list)


def parse(text: str) -> list[Block]:
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        comments: list[str] = []
        while i < len(lines) and lines[i].startswith("#"):
            comments.append(lines[i])
            i += 1
        if i >= len(lines) or not lines[i].strip():
            raise ScenarioError(f"line {i}: comment without a command")
        command, at = lines[i].strip(), i + 1
        i += 1
        if i >= len(lines) or lines[i].strip() != SEPARATOR:
            raise ScenarioError(f"line {at}: expected {SEPARATOR!r} after the command")
        i += 1
        expected: list[str] = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        blocks.append(Block(comments, command, expected, at))
    return blocks


def render(blocks: list[Block], use_actual: bool) -> str:
    parts = []
    for b in blocks:
        out = b.actual if use_actual else b.expected
        parts.append("\n".join([*b.comments, b.command, SEPARATOR, *out]))
    return "\n\n".join(parts) + "\n"


def _cut(nodes: list[str]) -> Callable[[Message], bool] | None:
    if not nodes:
        return None
    return lambda m: m.sender in nodes or m.target in nodes


class Runner:
    """Runs one scenario's commands against a fresh Script."""

    def __init__(self) -> None:
        self._script: Script | None = None
        self.proposals = 0

    @property
    def script(self) -> Script:
        if self._script is None:
            raise ScenarioError("no cluster yet: the first command must be `cluster`")
        return self._script

    def run(self, command: str) -> list[str]:
        words = command.split()
        name, pos, kw = words[0], [], {}
        for w in words[1:]:
            if "=" in w:
                k, v = w.split("=", 1)
                kw[k] = v
            else:
                pos.append(w)
        handler = getattr(self, f"cmd_{name}", None)
        if handler is None:
            raise ScenarioError(f"unknown command {name!r}")
        if name == "cluster":
            out: list[str] = handler(pos, kw)
            return out
        mark = len(self.script.transcript)
        printed: list[str] = handler(pos, kw)
        lines = self.script.transcript[mark:]
        if name == "run" or "show" in kw:
            show = [w for w in kw.get("show", "").split(",") if w]
            lines = [line for line in lines if self._interesting(line) or any(w in line for w in show)]
        return [*lines, *printed]

    def _interesting(self, line: str) -> bool:
        head, _, rest = line.partition(" ")
        return head in self.script.ids and re.match(r"(FOLLOWER|CANDIDATE|LEADER|complete) ", rest) is not None

    def _nodes(self, pos: list[str], at_least: int = 1) -> list[str]:
        if len(pos) < at_least:
            raise ScenarioError("missing node id")
        for n in pos:
            if n != "all" and n not in self.script.ids:
                raise ScenarioError(f"unknown node {n!r}")
        return pos

    @staticmethod
    def _drop(kw: dict[str, str]) -> Callable[[Message], bool] | None:
        return _cut([n for n in kw.get("drop", "").split(",") if n])

    # -- commands ------------------------------------------------------------------------------
    def cmd_cluster(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        ids = kw["nodes"].split(",")
        cfg: StoreConfig | None = None
        if "segment" in kw:
            seg = int(kw["segment"])
            cfg = StoreConfig(data_segment_bytes=seg, index_segment_bytes=32 * 64, max_body_bytes=1024,
                              file_reserved_hours=0)
        vote = int(kw.get("vote", "0"))
        stores: dict[str, LogStore] = {}
        for i in ids:
            terms = [int(t) for t in kw.get(f"log.{i}", "").split(",") if t]
            stores[i] = store_with_terms(terms, vote, cfg)
        raft = replace(SCRIPT_RAFT, pre_vote=kw.get("prevote", "true") == "true",
                       check_quorum=kw.get("lease", "true") == "true")
        members = kw["members"].split(",") if "members" in kw else None
        self._script = Script(ids, config=raft, stores=stores, members=members,
                              bootstrapped=kw.get("bootstrapped", "true") == "true")
        self.proposals = 0
        return []

    def cmd_elect(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        [node] = self._nodes(pos)
        self.script.elect(node, drop=self._drop(kw))
        return []

    def cmd_propose(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        [node] = self._nodes(pos)
        k = self.proposals
        self.proposals += 1
        size = int(kw.get("size", "0"))
        bodies = [f"p{k}-{i}".encode().ljust(size, b".") for i in range(int(kw.get("count", "1")))]
        self.script.propose(node, bodies)
        return []

    def cmd_deliver(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        self.script.deliver(drop=self._drop(kw))
        return []

    def cmd_settle(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        self.script.settle(drop=self._drop(kw))
        return []

    def cmd_tick(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        [node] = self._nodes(pos)
        ms = int(kw.get("ms", "0"))
        if node == "all":
            self.script.tick_all(ms)
        else:
            self.script.tick(node, ms)
        return []

    def cmd_run(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        self.script.run(int(kw["ms"]), drop=self._drop(kw))
        return []

    def cmd_flush(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        for node in self._nodes(pos):
            self.script.flush(node)
        return []

    def cmd_restart(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        for node in self._nodes(pos):
            self.script.restart(node)
        return []

    def cmd_wipe(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        for node in self._nodes(pos):
            self.script.wipe(node)
        return []

    def cmd_expire(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        [node] = self._nodes(pos)
        s = self.script
        store = s.stores[node]
        if "member_timeout" in kw:
            safe = s.nodes[node].expiry_safe_index(s.clock[node], int(kw["member_timeout"]))
        else:
            safe = store.committed_index
        dropped = store.expire(safe, 0.0)
        return [f"{node}: expired {dropped} (safe={safe}) begin={store.begin_index}"]

    def cmd_status(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        out = []
        for node in self._nodes(pos):
            n, st = self.script.nodes[node], self.script.stores[node]
            out.append(f"{node}: role={n.role.name} term={n.term} leader={n.leader_id} begin={st.begin_index} "
                       f"end={st.end_index} commit={st.committed_index} recovering={n.recovering} "
                       f"joining={n.joining}")
        return out

    def cmd_change(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        if len(pos) != 3 or pos[1] not in ("add", "promote", "remove"):
            raise ScenarioError("usage: change NODE add|promote|remove TARGET [address=host:port]")
        node, action, target = pos
        self._nodes([node])
        address = kw.get("address")
        changes: dict[str, Callable[[Membership], Membership]] = {
            "add": lambda m: m.with_learner(target, address), "promote": lambda m: m.promoted(target),
            "remove": lambda m: m.without(target)}
        self.script.change(node, changes[action])
        return []

    def cmd_config(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        out = []
        for node in self._nodes(pos):
            c = self.script.nodes[node].member.config
            learners = f" learners={','.join(sorted(c.learners))}" if c.learners else ""
            out.append(f"{node}: voters={','.join(sorted(c.voters))}{learners}")
        return out

    def cmd_log(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        out = []
        for node in self._nodes(pos):
            st = self.script.stores[node]
            pairs = " ".join(f"{i}:{st.term_at(i)}" for i in range(st.begin_index, st.end_index + 1))
            # The last entry's chain CRC digests the whole log: equal chains, byte-identical logs.
            chain = decode_header(st.read_raw(st.end_index, 1, 1 << 20)[0]).chain_crc if st.end_index >= 0 else 0
            out.append(f"{node}: {pairs} chain={chain:08x}" if pairs else f"{node}: chain={chain:08x}")
        return out


def run_file(path: Path) -> tuple[list[Block], bool]:
    """Run a scenario; returns its blocks (with `actual` filled in) and whether every output matched."""
    blocks = parse(path.read_text())
    runner = Runner()
    for b in blocks:
        try:
            b.actual = runner.run(b.command)
        except ScenarioError as e:
            raise ScenarioError(f"{path}:{b.line}: {b.command}: {e}") from e
    return blocks, all(b.actual == b.expected for b in blocks)


def diff(path: Path, blocks: list[Block]) -> str:
    return "".join(difflib.unified_diff(render(blocks, False).splitlines(keepends=True),
                                        render(blocks, True).splitlines(keepends=True),
                                        f"{path} (expected)", f"{path} (actual)"))


def check(path: Path, rewrite: bool = False) -> str:
    """Run a file; with `rewrite`, store the actual output and return "". Otherwise return the diff of
    expected vs actual ("" when they match)."""
    blocks, ok = run_file(path)
    if rewrite:
        text = render(blocks, True)
        if text != path.read_text():
            path.write_text(text)
        return ""
    return "" if ok else diff(path, blocks)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quorumlog.sim.scenario",
                                 description="Check (or rewrite) golden Raft scenario files.")
    ap.add_argument("--rewrite", action="store_true", help="replace expected outputs by the actual ones")
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args(argv)
    failed = 0
    for path in args.files:
        d = check(path, rewrite=args.rewrite)
        if d:
            failed += 1
            sys.stdout.write(d)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
