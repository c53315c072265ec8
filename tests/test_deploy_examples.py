"""The deployment examples (examples/deploy, docs/deployment.md) load with the real config loader and
the real `quorumlog serve` flags: a key that is not a setting, a peer list that differs between hosts or
a node left without authentication fails here, not on a production host."""

from __future__ import annotations

import configparser
import dataclasses
import os
import re
import secrets
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from quorumlog.cli import build_parser
from quorumlog.config import NodeConfig, is_loopback, load_node_config
from quorumlog.errors import ConfigError
from quorumlog.server.main import config_from_flags

DEPLOY = Path(__file__).resolve().parents[1] / "examples" / "deploy"
HOSTS = sorted((DEPLOY / "hosts").glob("*.toml"))
UNIT = DEPLOY / "systemd" / "quorumlog.service"
MANIFEST = DEPLOY / "kubernetes" / "quorumlog.yaml"


def _secret_files(doc: dict[str, Any]) -> list[str]:
    files = [d["secret_file"] for d in [doc, *doc.get("token", [])] if "secret_file" in d]
    return files + ([doc["admin_token_file"]] if "admin_token_file" in doc else [])


def installed(text: str, tmp_path: Path, name: str = "node.toml") -> Path:
    """The config as a host would have it: each secret file it names exists (under tmp_path, holding a
    random secret), the rest of the file unchanged."""
    for i, path in enumerate(_secret_files(tomllib.loads(text))):
        local = tmp_path / f"secret{i}"
        local.write_text(secrets.token_urlsafe(24) + "\n")
        text = text.replace(f'"{path}"', f'"{local}"')
    out = tmp_path / name
    out.write_text(text)
    return out


def serve(argv: list[str]) -> NodeConfig:
    """The NodeConfig `quorumlog <argv>` would run with, through the CLI's own parser and flag handling."""
    args = build_parser().parse_args(argv)
    assert args.command == "serve", argv
    return config_from_flags(config=args.config, node_id=args.node_id, groups=args.group, peers=args.peers,
                             data_dir=args.data_dir, admin_port=args.admin_port, cluster=args.cluster, secret=None,
                             listen=args.listen, flush=args.flush, insecure=args.insecure)


def assert_deployable(cfg: NodeConfig) -> None:
    """Authenticated beyond loopback, with an admin port on the same host behind its token, and every group
    naming this node."""
    host = cfg.listen.rpartition(":")[0]
    assert not is_loopback(host)
    assert cfg.secret is not None or cfg.tls_cert is not None, "protected mode would refuse this node"
    assert not cfg.insecure
    assert cfg.admin_listen is not None and cfg.admin_listen.rpartition(":")[0] == host
    assert cfg.admin_token is not None and not cfg.insecure_admin, "the admin port would be refused"
    assert cfg.data_dir.is_absolute()
    assert cfg.groups and all(cfg.node_id in g.peers for g in cfg.groups)


def test_there_is_one_host_config_per_node_of_a_three_node_cluster() -> None:
    assert [p.stem for p in HOSTS] == ["n0", "n1", "n2"]


@pytest.mark.parametrize("path", HOSTS, ids=lambda p: p.stem)
def test_each_host_config_loads_and_is_deployable(path: Path, tmp_path: Path) -> None:
    cfg = load_node_config(installed(path.read_text(), tmp_path))
    assert cfg.node_id == path.stem
    assert_deployable(cfg)
    assert cfg.tls_cert is not None and cfg.node_id in Path(cfg.tls_cert).name  # its own certificate
    for g in cfg.groups:  # it listens where its peers look for it
        assert g.peers[cfg.node_id] == cfg.listen


def test_the_hosts_agree_on_groups_members_and_settings(tmp_path: Path) -> None:
    """Nodes with different member lists refuse each other (docs/operations.md): the files must agree on
    everything but the node's own id, addresses and certificate."""
    cfgs = []
    for p in HOSTS:
        d = tmp_path / p.stem
        d.mkdir()
        cfgs.append(load_node_config(installed(p.read_text(), d)))
    first = cfgs[0]
    assert len(first.groups) == 2
    for cfg in cfgs[1:]:
        assert cfg.groups == first.groups
        assert cfg.cluster == first.cluster and cfg.data_dir == first.data_dir
        assert [t.name for t in cfg.tokens] == [t.name for t in first.tokens]
    assert len({c.listen for c in cfgs}) == 3
    # Each group's preferred leader on another host: the groups' writes spread over the machines.
    assert len({g.raft.preferred_leader for g in first.groups}) == len(first.groups)


def test_the_systemd_unit_runs_the_node_hardened_and_stops_it_gracefully(tmp_path: Path) -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(UNIT.read_text())
    svc = unit["Service"]
    argv = shlex.split(svc["ExecStart"])
    assert Path(argv[0]).name == "quorumlog"
    config_path = argv[argv.index("--config") + 1]
    assert config_path == "/etc/quorumlog/node.toml"
    assert svc["User"] != "root" and svc["User"] == svc["Group"]
    assert svc["Restart"] == "on-failure"
    assert int(svc["LimitNOFILE"]) >= 4 * 4096  # max_connections of the host configs, plus segment files
    assert svc["KillSignal"] == "SIGTERM" and int(svc["TimeoutStopSec"]) >= 10
    assert svc["ProtectSystem"] == "strict" and svc["NoNewPrivileges"] == "yes" and svc["PrivateTmp"] == "yes"
    assert svc["CapabilityBoundingSet"] == ""
    # Each host's config, installed where the unit expects it, runs with the unit's flags; its data
    # directory is the one path the unit may write.
    for p in HOSTS:
        d = tmp_path / p.stem
        d.mkdir()
        local = installed(p.read_text(), d)
        cfg = serve([a if a != config_path else str(local) for a in argv[1:]])
        assert cfg.node_id == p.stem
        assert_deployable(cfg)
        assert str(cfg.data_dir) in svc["ReadWritePaths"].split()
        assert cfg.max_connections * 4 <= int(svc["LimitNOFILE"])


def configmap_file(manifest: str, key: str) -> str:
    """One of the ConfigMap's files: the block scalar under `<key>: |` (no YAML library needed)."""
    lines = manifest.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"{key}: |") + 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    block = []
    for line in lines[start:]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        block.append(line[indent:])
    return "\n".join(block) + "\n"


def configmap_toml(manifest: str) -> str:
    """The ConfigMap's node.toml."""
    return configmap_file(manifest, "node.toml")


def pod_peers(ordinals: range) -> dict[str, str]:
    return {f"quorumlog-{n}": f"quorumlog-{n}.quorumlog-peers.quorumlog.svc.cluster.local:9000" for n in ordinals}


# A stand-in for the image's `quorumlog`: records the arguments start.sh execs it with, NUL-separated.
FAKE_QUORUMLOG = '#!/bin/sh\nfor a; do printf \'%s\\0\' "$a"; done >"$ARGV_OUT"\n'


class Started(NamedTuple):
    """What the container's entrypoint (the ConfigMap's start.sh) did in a pod."""

    returncode: int
    stderr: str
    argv: list[str] | None  # the arguments of the `quorumlog` it exec'd, with the pod's paths; None: it did not
    files: dict[str, Path]  # the pod's path of each file the script reads or writes -> the test's stand-in


def start_pod(tmp_path: Path, pod: str, *, shell: str = "sh", node_toml: str | None = None,
              manifest: str | None = None) -> Started:
    """Run the manifest's start.sh as the pod `pod` would (POD_NAME set), with its config and spare_config
    paths moved under tmp_path and a stand-in `quorumlog` first on the PATH."""
    manifest = MANIFEST.read_text() if manifest is None else manifest
    script = configmap_file(manifest, "start.sh")
    work = tmp_path / pod
    (work / "bin").mkdir(parents=True)
    files: dict[str, Path] = {}
    for var in ("config", "spare_config"):
        m = re.search(rf"^{var}=(/\S+)$", script, re.M)
        assert m, f"start.sh sets no {var}=/path"
        files[m.group(1)] = work / f"{var}.toml"
        script = script[:m.start(1)] + str(files[m.group(1)]) + script[m.end(1):]
    config, _ = files
    files[config].write_text(configmap_toml(manifest) if node_toml is None else node_toml)
    fake = work / "bin" / "quorumlog"
    fake.write_text(FAKE_QUORUMLOG)
    fake.chmod(0o755)
    (work / "start.sh").write_text(script)
    out = work / "argv"
    env = {"POD_NAME": pod, "ARGV_OUT": str(out), "PATH": f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run([shell, str(work / "start.sh")], env=env, capture_output=True, text=True, timeout=30)
    argv = None
    if out.exists():
        pod_path = {str(local): path for path, local in files.items()}
        argv = [pod_path.get(a, a) for a in out.read_text().split("\0")[:-1]]
    return Started(r.returncode, r.stderr, argv, files)


def started_config(tmp_path: Path, pod: str, started: Started) -> tuple[NodeConfig, str]:
    """The node config the pod's `quorumlog serve` runs with (its file, secrets installed, through the CLI's
    parser), checked against the config loader's reading of the same file; and that file's text."""
    assert started.returncode == 0, started.stderr
    assert started.argv is not None
    argv = started.argv
    path = argv[argv.index("--config") + 1]
    text = started.files[path].read_text()
    d = tmp_path / f"{pod}-installed"
    d.mkdir()
    local = installed(text, d)
    cfg = serve([str(local) if a == path else a for a in argv])
    assert cfg == load_node_config(local, node_id=pod)
    return cfg, text


def test_the_kubernetes_node_config_serves_every_pod_by_its_name(tmp_path: Path) -> None:
    """One ConfigMap file for the StatefulSet's pods: `--id <pod name>` picks the node; the peers are the
    pods' stable names under the headless Service."""
    text = configmap_toml(MANIFEST.read_text())
    assert not re.search(r"^(id|node_id)\s*=", text, re.M)  # the file names no node
    local = installed(text, tmp_path)
    with pytest.raises(ConfigError, match="names no node"):
        load_node_config(local)
    for i in range(3):
        cfg = serve(["serve", "--config", str(local), "--id", f"quorumlog-{i}"])
        assert cfg.node_id == f"quorumlog-{i}" and cfg.listen == "0.0.0.0:9000"
        assert_deployable(cfg)
        for g in cfg.groups:
            assert g.peers == {f"quorumlog-{n}": f"quorumlog-{n}.quorumlog-peers.quorumlog.svc.cluster.local:9000"
                               for n in range(3)}
    with pytest.raises(ConfigError, match="not a peer"):
        serve(["serve", "--config", str(local), "--id", "quorumlog-3"])


SHELLS = [pytest.param(s, marks=pytest.mark.skipif(not shutil.which(s), reason=f"no {s}")) for s in ("sh", "bash")]


@pytest.mark.parametrize("ordinal", range(3))
def test_the_first_three_pods_start_with_the_configmap_file_as_it_is(tmp_path: Path, ordinal: int) -> None:
    """quorumlog-0..2 are the groups' members from the start: their entrypoint runs the ConfigMap's
    node.toml unchanged, the static group of three, none joining."""
    pod = f"quorumlog-{ordinal}"
    started = start_pod(tmp_path, pod)
    config, spare_config = started.files
    assert started.argv == ["serve", "--config", config, "--id", pod, "--log-level", "INFO"], started.stderr
    assert not started.files[spare_config].exists()
    cfg, text = started_config(tmp_path, pod, started)
    assert text == configmap_toml(MANIFEST.read_text())
    assert cfg.node_id == pod
    assert_deployable(cfg)
    assert [g.name for g in cfg.groups] == ["g0", "g1"]
    for g in cfg.groups:
        assert g.peers == pod_peers(range(3))
        assert g.join is False


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("ordinal", [3, 4])
def test_a_pod_past_the_third_starts_as_a_spare_that_joins(tmp_path: Path, ordinal: int, shell: str) -> None:
    """`kubectl scale --replicas=4`: quorumlog-3 runs node.toml with join = true in every group and itself
    added to the peers (quorumlog-4, after it, names quorumlog-3 too), and nothing else changed; it counts
    for nothing until `quorumlog members add` names it."""
    pod = f"quorumlog-{ordinal}"
    started = start_pod(tmp_path, pod, shell=shell)
    config, spare_config = started.files
    assert started.argv == ["serve", "--config", spare_config, "--id", pod, "--log-level", "INFO"], started.stderr
    assert started.files[config].read_text() == configmap_toml(MANIFEST.read_text())  # read, not written
    cfg, _ = started_config(tmp_path, pod, started)
    assert cfg.node_id == pod and cfg.listen == "0.0.0.0:9000"
    assert_deployable(cfg)
    static = load_node_config(installed(configmap_toml(MANIFEST.read_text()), tmp_path), node_id="quorumlog-0")
    assert [g.name for g in cfg.groups] == [g.name for g in static.groups] == ["g0", "g1"]
    for g, s in zip(cfg.groups, static.groups, strict=True):
        assert g.join is True
        assert g.peers == pod_peers(range(ordinal + 1))
        assert list(g.peers)[:3] == list(s.peers) == list(pod_peers(range(3)))
        assert dataclasses.replace(g, peers=s.peers, join=False) == s  # raft, store and HA settings as they were
    assert dataclasses.replace(cfg, node_id=static.node_id, groups=static.groups, secret=static.secret,
                               admin_token=static.admin_token) == static


def test_the_start_script_refuses_what_it_cannot_turn_into_a_spare(tmp_path: Path) -> None:
    """A pod name without an ordinal, or a group whose peers are not the one-line string it extends, stops
    the pod with a reason instead of running a node that could never join."""
    started = start_pod(tmp_path / "a", "quorumlog")
    assert started.returncode != 0 and started.argv is None
    assert "ordinal" in started.stderr
    text = configmap_toml(MANIFEST.read_text())
    line = next(x for x in text.splitlines() if x.startswith("peers = "))
    as_table = "peers = { " + ", ".join(f'{k} = "{v}"' for k, v in pod_peers(range(3)).items()) + " }"
    started = start_pod(tmp_path / "b", "quorumlog-3", node_toml=text.replace(line, as_table, 1))
    assert started.returncode != 0 and started.argv is None
    assert "1 of the 2 groups" in started.stderr


def test_serve_id_replaces_the_file_id_before_validation(tmp_path: Path) -> None:
    """--id with a file naming another node: the node is the one named on the command line, and its
    listen address is its own entry in the peer list."""
    toml = tmp_path / "node.toml"
    toml.write_text('id = "n0"\n[[group]]\nname = "g0"\npeers = "n0=127.0.0.1:9000,n1=127.0.0.2:9001"\n')
    cfg = serve(["serve", "--config", str(toml), "--id", "n1"])
    assert cfg.node_id == "n1" and cfg.listen == "127.0.0.2:9001"


def _docs(manifest: str) -> dict[tuple[str, str], dict[str, Any]]:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed: the manifest's structure is not checked")
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(manifest) if d}


def test_the_kubernetes_manifest_parses_and_holds_the_cluster(tmp_path: Path) -> None:
    text = MANIFEST.read_text()
    docs = _docs(text)
    sts = docs[("StatefulSet", "quorumlog")]
    ns = sts["metadata"]["namespace"]
    assert all(d["metadata"].get("namespace", ns) == ns for d in docs.values())
    spec = sts["spec"]
    assert spec["replicas"] == 3 and spec["podManagementPolicy"] == "Parallel"
    peers = docs[("Service", spec["serviceName"])]["spec"]
    assert peers["clusterIP"] == "None" and peers["publishNotReadyAddresses"] is True
    assert docs[("Service", "quorumlog")]["spec"].get("clusterIP") != "None"
    pdb = docs[("PodDisruptionBudget", "quorumlog")]["spec"]
    labels = spec["selector"]["matchLabels"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"] == labels
    assert peers["selector"] == labels == spec["template"]["metadata"]["labels"]
    pod = spec["template"]["spec"]
    (anti,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname" and anti["labelSelector"]["matchLabels"] == labels
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["terminationGracePeriodSeconds"] >= 10
    (c,) = pod["containers"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["resources"]["requests"] and c["resources"]["limits"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "admin"}  # open without the admin token
    assert [t["metadata"]["name"] for t in spec["volumeClaimTemplates"]] == ["data"]
    # The container's command line, with the pod's name where Kubernetes substitutes it, is a node
    # config whose ports, peers and files are the ones the manifest declares and mounts.
    cm = docs[("ConfigMap", "quorumlog-config")]["data"]["node.toml"]
    assert cm == configmap_toml(text)
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "quorumlog-config"
    secret_name = volumes["secret"]["secret"]["secretName"]
    assert {"secret", "admin-token"} <= set(docs[("Secret", secret_name)]["stringData"])
    assert tomllib.loads(cm)["secret_file"] == f"{mounts['secret']}/secret"
    assert tomllib.loads(cm)["admin_token_file"] == f"{mounts['secret']}/admin-token"
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}["POD_NAME"] == "metadata.name"
    # The container runs the ConfigMap's start.sh, which execs `quorumlog serve` with the pod's config:
    # node.toml from the ConfigMap's mount, or (a spare) its copy on the writable /tmp of a read-only root.
    data = docs[("ConfigMap", "quorumlog-config")]["data"]
    assert data["start.sh"] == configmap_file(text, "start.sh")
    assert c["command"] == ["/bin/sh", f"{mounts['config']}/start.sh"] and not c.get("args")
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert "emptyDir" in volumes[next(n for n, m in mounts.items() if m == "/tmp")]
    for i in range(4):
        pod = f"quorumlog-{i}"
        started = start_pod(tmp_path / "pods", pod, manifest=text)
        config, spare_config = started.files
        assert config == f"{mounts['config']}/node.toml" and Path(spare_config).parent == Path("/tmp")
        cfg, _ = started_config(tmp_path, pod, started)
        assert cfg.node_id == pod
        assert cfg.listen == f"0.0.0.0:{ports['peer']}" and cfg.admin_listen == f"0.0.0.0:{ports['admin']}"
        assert str(cfg.data_dir) == mounts["data"]
        for g in cfg.groups:
            assert g.join is (i >= spec["replicas"])
            assert g.peers[cfg.node_id] == f"{cfg.node_id}.{spec['serviceName']}.{ns}.svc.cluster.local:{ports['peer']}"
