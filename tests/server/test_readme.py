"""The README's shell sessions and client example, run as written: `local-cluster`, then the commands of
the other shell in order, against real nodes in a temp dir. What the README shows a command print is
compared with what it prints. Only what must differ is changed: the data directory and the ports (the
README's may be taken here), and, in the comparison, what varies from run to run (pids, terms, epochs).
So the README cannot drift from what the program does."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .test_server_cli import free_range

README = Path(__file__).resolve().parents[2] / "README.md"
BASE = 9000  # the README's --base-port: node i at BASE+i, its admin port at BASE+100+i


@dataclass
class Command:
    line: str  # as the README writes it, after "$ "
    shows: list[str] = field(default_factory=list)  # the lines the README shows it print


def section(title: str) -> str:
    """The README's text under `### title`, up to the next heading."""
    text = README.read_text()
    start = text.index(f"\n### {title}\n")
    end = re.compile(r"\n##+ ").search(text, start + 1)
    return text[start:end.start() if end else len(text)]


def blocks(text: str) -> list[str]:
    """The fenced code blocks of `text`, without their fences."""
    return re.findall(r"^```[a-z]*\n(.*?)^```$", text, re.S | re.M)


def session(block: str) -> list[Command]:
    """A shell session: each "$ " line a command, the lines up to the next one what it prints."""
    out: list[Command] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            out.append(Command(line[2:]))
        elif out:
            out[-1].shows.append(line)
    return out


class Place:
    """The README's data directory and ports, moved to a temp dir and a free port range."""

    def __init__(self, readme_dir: str, data_dir: Path, base: int) -> None:
        self.readme_dir, self.data_dir, self.base = readme_dir, data_dir, base

    def __call__(self, text: str) -> str:
        text = text.replace(self.readme_dir, str(self.data_dir))
        return re.sub(r"(?<![\d.])9([01]\d\d)(?!\d)", lambda m: str(self.base + int(m.group(1))), text)


def varying(line: str) -> str:
    """`line` with what differs from run to run made alike: pids, terms, epochs."""
    line = re.sub(r"pid \d+", "pid N", line)
    line = re.sub(r"epoch \d+", "epoch E", line)
    if re.fullmatch(r"\d+\t\d+\t\d+", line):  # an append's index, term, position
        index, _term, pos = line.split("\t")
        return f"{index}\tT\t{pos}"
    if line.startswith("{"):
        doc = json.loads(line)
        doc["term"] = "T"
        return json.dumps(doc)
    return line


def shell_env() -> dict[str, str]:
    """This interpreter's `quorumlog` first on PATH, no quorumlog settings from the outside."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUORUMLOG_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


class LocalClusterCommand:
    """The README's `quorumlog local-cluster` line, running; stopped (and its nodes, by pid) at close()."""

    def __init__(self, line: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(["bash", "-c", line], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env, start_new_session=True)
        self.banner: list[str] = []

    def read_banner(self, timeout: float = 60) -> list[str]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.banner.append(line.rstrip("\n"))
            if line.startswith("Ctrl-C stops every node."):
                return self.banner
        raise AssertionError(f"no whole banner from local-cluster: {self.banner}")

    def exports(self) -> dict[str, str]:
        """The banner's `export NAME=VALUE` lines, as a user pastes them into the other shell."""
        return {m[1]: m[2] for line in self.banner if (m := re.fullmatch(r"\s+export (\w+)=(\S+)", line))}

    def stop(self) -> None:
        """Ctrl-C's way: it stops every node cleanly and exits 0."""
        os.killpg(self.proc.pid, signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0 and "stopped: n0 exit 0, n1 exit 0, n2 exit 0" in out, out

    def close(self) -> None:
        """Whatever happened: the command and its nodes killed by pid if they still run."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        for pid in re.findall(r" pid (\d+) ", "\n".join(self.banner)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def run(cmd: Command, env: dict[str, str], timeout: float = 120) -> list[str]:
    """One command of the other shell, as bash runs it; its output lines. `tail -f` runs until it printed
    what the README shows, then gets Ctrl-C."""
    if " -f" not in cmd.line:
        r = subprocess.run(["bash", "-c", cmd.line], capture_output=True, text=True, env=env, timeout=timeout)
        assert r.returncode == 0, (cmd.line, r.stdout, r.stderr)
        return r.stdout.splitlines()
    proc = subprocess.Popen(["bash", "-c", f"exec {cmd.line}"], stdout=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().rstrip("\n") for _ in cmd.shows]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, cmd.line
        return lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def start_cluster(block: str, place: Place) -> tuple[LocalClusterCommand, Command]:
    (cmd,) = session(block)
    line = place(cmd.line)
    if "--base-port" not in line:  # the default port may be taken here
        line += f" --base-port {place.base}"
    return LocalClusterCommand(line, shell_env()), cmd


@pytest.mark.slow
def test_the_readme_quick_start_runs_as_written(tmp_path: Path) -> None:
    """"A local cluster": the banner as shown, every command of the other shell with what it prints (bench
    included: it starts a cluster of its own), then "The client"'s example against the same cluster."""
    place = Place("/tmp/qc", tmp_path / "qc", free_range())
    first, rest = blocks(section("A local cluster"))
    cluster, cmd = start_cluster(first, place)
    try:
        banner = cluster.read_banner()
        assert [varying(line) for line in banner] == [varying(place(line)) for line in cmd.shows], banner
        env = shell_env()
        for c in session(rest):
            line = place(c.line)
            if line.startswith("export "):
                name, _, value = line[len("export "):].partition("=")
                assert cluster.exports()[name] == value, (line, cluster.banner)  # the line it printed
                env[name] = value
                continue
            out = run(Command(line, c.shows), env, timeout=300)
            if c.shows:
                assert [varying(x) for x in out] == [varying(place(x)) for x in c.shows], (c.line, out)
            elif line.startswith("quorumlog status"):
                assert "leader" in "\n".join(out) and "follower" in "\n".join(out), out
            elif line.startswith("quorumlog bench"):
                assert re.search(r"appends/s +│ +[\d,]+", "\n".join(out)) and "failover" in "\n".join(out), out

        (example,) = blocks(section("The client"))
        r = subprocess.run([sys.executable, "-c", place(example)], capture_output=True, text=True, env=env,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        printed = r.stdout.splitlines()
        # The loop's entries, then the metadata: leader, term and members in one short line.
        assert printed[:2] == ["1 b'hello'", "2 b'world'"], printed
        assert re.fullmatch(r"Metadata\(group='g0', leader='n\d', term=\d+, peers=\{'n0': '127\.0\.0\.1:\d+', "
                            r"'n1': '127\.0\.0\.1:\d+', 'n2': '127\.0\.0\.1:\d+'\}\)", printed[-1]), printed[-1]
        cluster.stop()
    finally:
        cluster.close()


def test_the_readme_primary_backup_session_runs_as_written(tmp_path: Path) -> None:
    """"Primary/backup replication": local-cluster with a controller, then the other shell's commands (with
    the banner's export lines pasted first: the session's port is not the default here), status showing
    primaries and backups as said."""
    place = Place("/tmp/qpb", tmp_path / "qpb", free_range())
    (block,) = blocks(section("Primary/backup replication"))
    commands = session(block)
    cluster, _cmd = start_cluster(f"$ {commands[0].line}", place)
    try:
        cluster.read_banner()
        env = {**shell_env(), **cluster.exports()}
        for c in commands[1:]:
            line = place(c.line)
            if line.startswith("export "):
                name, _, value = line[len("export "):].split("#")[0].strip().partition("=")
                assert env[name] == value, (line, cluster.banner)
                continue
            out = run(Command(line, c.shows), env)
            if c.shows:
                assert [varying(x) for x in out] == [varying(place(x)) for x in c.shows], (c.line, out)
            elif line.startswith("quorumlog status"):
                roles = sorted(m.group(1) for r in out if " g0 " in r and (m := re.search(r"│ (primary|backup) +│", r)))
                assert roles == ["backup", "backup", "primary"], out
        cluster.stop()
    finally:
        cluster.close()
