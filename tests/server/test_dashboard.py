"""The cluster dashboard on the admin port, against real `quorumlog serve` processes: its JSON endpoint
(`/api/cluster`), and the page itself in headless Chromium (Debian's chromium and chromium-driver,
driven by Selenium): every node named, the leader marked, a SIGKILLed leader shown down and its
successor marked within seconds, and text from the network shown as text, never run as markup."""

from __future__ import annotations

import asyncio
import json
import math
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from quorumlog import Client
from quorumlog.config import GroupConfig, NodeConfig, StoreConfig
from quorumlog.errors import QuorumLogError
from quorumlog.net.connection import connect
from quorumlog.net.errors import HandshakeError
from quorumlog.server.cluster import LocalCluster, LocalNode
from quorumlog.server.dashboard.docs import GroupDoc, NodeDoc, parse_status
from quorumlog.server.dashboard.history import Series
from quorumlog.server.dashboard.view import ClusterView
from quorumlog.server.events import REFUSAL, RESET, Events
from quorumlog.server.group import Group
from quorumlog.server.node import NodeServer
from quorumlog.server.store import NodeStore
from quorumlog.store.file_store import store_dir

from .conftest import FAST_RAFT, node_index, wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Without the background-networking flags Chromium stalls on a closed network (updates, sync, QUIC).
CHROME_ARGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage", "--window-size=1400,1000")


def api(node: LocalNode, timeout: float = 5.0) -> dict[str, Any]:
    with urllib.request.urlopen(node.admin_url + "/api/cluster", timeout=timeout) as r:
        assert r.status == 200 and r.headers.get_content_type() == "application/json"
        return dict(json.loads(r.read()))


def wait_api(node: LocalNode, predicate: Callable[[dict[str, Any]], bool], timeout: float,
             what: str) -> dict[str, Any]:
    """Poll the node's /api/cluster (as the page does) until `predicate` holds."""
    def probe() -> dict[str, Any] | None:
        try:
            doc = api(node)
        except (OSError, urllib.error.URLError):  # the admin port is not serving yet
            return None
        return doc if predicate(doc) else None

    return wait_until(probe, timeout, what, interval=0.3)


def group(doc: dict[str, Any], name: str = "g0") -> dict[str, Any]:
    return next(g for g in doc["groups"] if g["name"] == name)


def all_up_with_leader(doc: dict[str, Any]) -> bool:
    return all(n["up"] for n in doc["nodes"]) and group(doc)["leader"] is not None


def all_following_the_leader(doc: dict[str, Any]) -> bool:
    """Every node up, and every replica in the leader's term naming it (a follower that did not vote
    learns both from the first heartbeat, up to a heartbeat interval after the election)."""
    g = group(doc) if all_up_with_leader(doc) else None
    return g is not None and all(r["term"] == g["term"] and r["leader"] == g["leader"] for r in g["replicas"])


def test_cluster_api_shape_rates_and_a_dead_peer(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory()
    served = cluster.nodes[0]
    doc = wait_api(served, all_following_the_leader, 30, "every node up and following a leader in /api/cluster")
    ids = [n.node_id for n in cluster.nodes]
    assert doc["served_by"] == "n0" and doc["cluster"] == "quorumlog"
    assert [n["id"] for n in doc["nodes"]] == ids
    assert [n["self"] for n in doc["nodes"]] == [True, False, False]
    g = group(doc)
    leader = g["leader"]
    assert [r["node"] for r in g["replicas"]] == ids
    assert [r["node"] for r in g["replicas"] if r["role"] == "leader"] == [leader]
    assert next(n for n in doc["nodes"] if n["id"] == leader)["leads"] == ["g0"]
    for r in g["replicas"]:
        assert r["up"] and r["term"] == g["term"] and r["leader"] == leader and r["lag"] is not None
        assert {"begin", "end", "committed", "durable", "pending", "entries_s", "bytes_s", "fsync_s",
                "commit_s", "lagging"} <= set(r)
    # Every node's own election is among the events, each tagged with the node that recorded it.
    elections = {e["node"] for e in doc["events"] if e["kind"] == "election" and e["group"] == "g0"}
    assert elections == set(ids)
    assert any(e["text"] == "became leader in term " + str(g["term"]) and e["node"] == leader for e in doc["events"])

    # Traffic: appends per second and bytes per second come from successive samples of the counters.
    with Client(cluster.endpoints) as c:
        for _ in range(6):
            c.append_many([b"x" * 200] * 500)
            api(served)
            time.sleep(0.3)
    doc = wait_api(served, lambda d: group(d)["replicas"][node_index(cluster, leader)]["committed"] >= 3000,
                   10, "3000 entries committed")
    g = group(doc)
    spark = g["spark"]
    assert max(v or 0 for v in spark["entries_s"]) > 100 and max(v or 0 for v in spark["bytes_s"]) > 100 * 200
    mine = g["replicas"][node_index(cluster, leader)]
    assert mine["fsync_s"]["p99"] > 0 and mine["commit_s"]["p50"] > 0  # observed within the window
    up = next(n for n in doc["nodes"] if n["id"] == leader)
    assert up["uptime_s"] > 0 and 0 <= up["loop_lag_s"]["p50"] <= up["loop_lag_s"]["p99"]

    # A dead peer is reported down (with why), quickly, and never turns the endpoint into an error.
    cluster.kill(2, signal.SIGKILL)
    doc = wait_api(served, lambda d: not d["nodes"][2]["up"], 10, "n2 reported down")
    n2 = doc["nodes"][2]
    assert n2["error"] and "uptime_s" not in n2
    assert [n["up"] for n in doc["nodes"]] == [True, True, False]
    row = group(doc)["replicas"][2]
    assert row == {"node": "n2", "up": False, "missing": False, "learner": False}
    assert any(e["kind"] == "node" and "n2 is down" in e["text"] for e in doc["events"])
    for _ in range(3):  # the dead member does not hold the page up
        t0 = time.monotonic()
        doc = api(served)
        assert time.monotonic() - t0 < 2.5 and not doc["nodes"][2]["up"]
        time.sleep(0.5)
    # The dead node's events, learnt while it was up, are still shown.
    assert any(e["node"] == "n2" and e["kind"] == "election" for e in doc["events"])


@pytest.mark.parametrize("auth", ["secret", "mutual-tls"])
def test_cluster_api_with_the_clusters_credentials(cluster_factory: Any, tmp_path: Path, auth: str) -> None:
    """The serving node asks its peers as itself: with the shared secret, or with its own certificate
    (a peer refuses a HELLO whose id is not the one the certificate names)."""
    if auth == "secret":
        cluster: LocalCluster = cluster_factory(secret="dashboard-test-secret")
    else:
        pytest.importorskip("cryptography")
        certs = tmp_path / "certs"
        r = subprocess.run([sys.executable, "-m", "quorumlog", "certs", "init", "--dir", str(certs), "--nodes",
                            "n0,n1,n2"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        cluster = cluster_factory(tls_dir=certs)
    doc = wait_api(cluster.nodes[1], all_up_with_leader, 30, "every node up and a leader")
    assert [r["up"] and r["role"] in ("leader", "follower") for r in group(doc)["replicas"]] == [True] * 3
    refusals = [e for e in doc["events"] if e["kind"] == REFUSAL]
    assert refusals == []  # nobody refused the dashboard's connections


def test_refusals_become_events(cluster_factory: Any) -> None:
    """A permission denied and a connection refused at max_connections show among the node's events."""
    cluster: LocalCluster = cluster_factory(nodes=1, secret="cluster-5ecret", node={"max_connections": 4},
                                            tokens=[{"name": "reader", "secret": "r-5ecret",
                                                     "permissions": {"g0": ["read"]}}])
    node = cluster.nodes[0]
    wait_api(node, all_up_with_leader, 30, "a leader")
    with Client(cluster.endpoints, secret="r-5ecret", token="reader", retry_timeout=5) as r, \
            pytest.raises(QuorumLogError):
        r.append(b"not allowed")

    async def past_the_limit() -> None:  # authenticated clients, until the node refuses one at HELLO
        conns = []
        try:
            for _ in range(6):
                conns.append(await connect("127.0.0.1", node.port, cluster="quorumlog", node_id="client:reader",
                                           secret="r-5ecret", timeout=5))
        except HandshakeError as e:
            assert "max_connections" in str(e)
        finally:
            for c in conns:
                c.abort()

    asyncio.run(past_the_limit())
    doc = wait_api(node, lambda d: any("max_connections" in e["text"] for e in d["events"]), 10,
                   "the limit hit among the events")
    texts = [(e["kind"], e["group"], e["text"]) for e in doc["events"]]
    assert (REFUSAL, "g0", "permission denied: client:reader may not append") in texts
    assert any(k == REFUSAL and t.endswith("connections refused: max_connections reached") for k, _, t in texts)


def test_dashboard_static_files(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory(nodes=1)
    base = cluster.nodes[0].admin_url
    wait_until(lambda: _get(base + "/"), 30, "the admin port")
    page = _get(base + "/")
    assert page is not None and b"/dashboard/app.js" in page
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
        with urllib.request.urlopen(f"{base}/dashboard/{name}", timeout=5) as r:
            assert r.headers.get_content_type() == kind and len(r.read()) > 1000
    for bad in ("index.html", "..%2Fadmin.py", "nope.js"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{base}/dashboard/{bad}", timeout=5)
        assert e.value.code == 404


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return bytes(r.read())
    except (OSError, urllib.error.URLError):
        return None


# -- the page in a browser ---------------------------------------------------------------------------

@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.skip(f"needs Debian's chromium and chromium-driver ({', '.join(missing)} missing: `make install`)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in (*CHROME_ARGS, f"--user-data-dir={tmp_path / 'chromium'}"):
        opts.add_argument(arg)
    service = Service(str(CHROMEDRIVER))
    driver = webdriver.Chrome(service=service, options=opts)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(10)
    try:
        yield driver
    finally:
        driver.quit()
        proc = service.process  # quit() stops chromedriver and its browser; make sure of the former
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(5)


PAGE_STATE = """
const q = (s) => [...document.querySelectorAll(s)];
const g0 = document.querySelector('section.group[data-group="g0"]');
return {
  nodes: Object.fromEntries(q('article.node').map((n) => [n.dataset.node, [n.dataset.state, n.dataset.leader]])),
  leader: g0 ? g0.dataset.leader : null,
  rows: Object.fromEntries(q('section.group[data-group="g0"] tbody tr').map((r) => [r.dataset.node, r.dataset.role])),
  down: Object.fromEntries(q('section.group[data-group="g0"] tbody tr').map((r) => [r.dataset.node, r.dataset.state])),
};
"""


def page_state(driver: Any) -> dict[str, Any]:
    return dict(driver.execute_script(PAGE_STATE))


def wait_page(driver: Any, predicate: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        s = page_state(driver)
        return s if predicate(s) else None

    return wait_until(probe, timeout, what, interval=0.2)


def test_page_marks_the_leader_and_shows_a_killed_leader_down(cluster_factory: Any, browser: Any) -> None:
    cluster: LocalCluster = cluster_factory()
    doc = wait_api(cluster.nodes[0], all_up_with_leader, 30, "every node up and a leader")
    leader = group(doc)["leader"]
    ids = [n.node_id for n in cluster.nodes]
    # Open the page on a node that survives the kill.
    viewer = next(n for n in cluster.nodes if n.node_id != leader)
    browser.get(viewer.admin_url + "/")

    s = wait_page(browser, lambda s: len(s["nodes"]) == 3 and s["leader"] == leader, 15,
                  "every node and the leader on the page")
    assert sorted(s["nodes"]) == ids
    assert all(state == "up" for state, _ in s["nodes"].values())
    assert {n for n, (_, lead) in s["nodes"].items() if lead == "true"} == {leader}
    assert [n for n, role in s["rows"].items() if role == "leader"] == [leader]
    assert browser.find_element("css selector", "#conn").text == "live"

    cluster.kill(node_index(cluster, leader), signal.SIGKILL)
    t0 = time.monotonic()
    s = wait_page(browser, lambda s: s["nodes"][leader][0] == "down" and s["leader"] not in ("", None, leader),
                  15, f"{leader} shown down and a new leader marked")
    new = s["leader"]
    assert new != leader and s["nodes"][new] == ["up", "true"] and s["nodes"][leader][1] == "false"
    assert s["rows"][new] == "leader" and s["down"][leader] == "down"
    assert time.monotonic() - t0 < 15


XSS = '<img src=x onerror="document.body.dataset.pwned=1">'


def test_text_from_the_network_is_shown_as_text(cluster_factory: Any, browser: Any) -> None:
    """A stranger's HELLO names any cluster it likes; the refusal event carries it to the page."""
    cluster: LocalCluster = cluster_factory(nodes=1)
    node = cluster.nodes[0]
    wait_api(node, all_up_with_leader, 30, "a leader")
    browser.get(node.admin_url + "/")
    wait_page(browser, lambda s: s["leader"] == "n0", 15, "the page")

    async def refused_hello() -> None:
        with pytest.raises(HandshakeError):
            await connect("127.0.0.1", node.port, cluster=XSS, timeout=5)

    asyncio.run(refused_hello())
    wait_until(lambda: XSS in browser.find_element("css selector", "#events").text, 15,
               "the refusal event on the page")
    found = browser.execute_script("return [document.querySelectorAll('img').length, "
                                   "document.body.dataset.pwned === undefined]")
    assert found == [0, True]
    events = api(node)["events"]
    assert any(e["kind"] == REFUSAL and XSS in e["text"] for e in events)


# -- the pieces, without processes -----------------------------------------------------------------

def test_events_fold_repeats_and_stay_bounded() -> None:
    now = [1000.0]
    ev = Events(size=5, clock=lambda: now[0])
    for i in range(3):
        now[0] += 1
        ev.record(REFUSAL, "refused HELLO of n9", "g0")
        ev.record("election", f"term {i}", "g0")
    recent = ev.recent()
    assert [e["text"] for e in recent] == ["term 0", "term 1", "refused HELLO of n9", "term 2"]
    assert recent[2]["count"] == 3 and recent[2]["t"] == 1003.0
    for i in range(10):
        ev.record("election", f"later {i}")
    # Five events, and the refusal in a ring of its own: the elections did not push it out, nor it them.
    assert len(ev) == 6 and ev.recent()[-1]["text"] == "later 9" and ev.recent()[0]["text"] == "refused HELLO of n9"
    ev.record(REFUSAL, "x" * 10_000)
    assert len(ev.recent()[-1]["text"]) == 300


def test_series_rates_windows_and_restarts() -> None:
    s = Series()
    bounds = (0.001, 0.01)
    assert s.add(10.0, {"n": 100}, {"h": (bounds, (0, 0, 0))})
    assert s.rate("n") is None and s.quantiles("h") is None
    assert not s.add(10.0, {"n": 100})  # the same status twice
    s.add(12.0, {"n": 300}, {"h": (bounds, (98, 1, 1))})
    assert s.rate("n") == 100.0
    q = s.quantiles("h")
    assert q is not None and q["p50"] == 0.001 and q["p99"] == 0.01
    s.add(13.0, {"n": 300}, {"h": (bounds, (98, 1, 3))})
    q = s.quantiles("h")
    assert q is not None and q["p99"] is None  # above the largest bound
    s.add(2.0, {"n": 5})  # uptime went back: a restart, a new series (no negative rate)
    assert s.rate("n") is None and s.spark("n") == [None]


def test_a_garbled_status_document_reads_as_unknown() -> None:
    doc = parse_status("n1", {"node": 7, "uptime_s": math.nan, "loop_lag_s": {"bounds": [1.0], "counts": [1, -1]},
                              "groups": {"g0": {"term": "3", "end_index": 2 ** 70, "stats": [], "peer_lag": {"n2": -4}},
                                         "g1": None, 5: {}},
                              "events": [1, {"t": 5, "text": "ok", "kind": "<b>", "count": "x"}, {"t": "x"}]})
    assert doc.node == "n1" and doc.uptime_s == 0.0 and doc.hists == {}
    assert doc.groups["g0"].term == 0 and doc.groups["g0"].end == -1 and doc.groups["g0"].peer_lag == {}
    assert doc.groups["g1"].role is None and 5 not in doc.groups
    assert doc.events == [{"t": 5.0, "kind": "other", "group": None, "text": "ok", "count": 1}]
    assert parse_status("n1", b"\x00").groups == {}


def test_store_cuts_and_recovery_at_start_become_events(tmp_path: Path) -> None:
    """A follower's log truncated or reset by its leader, and what store recovery repaired at start, are
    recorded where they happen: the node's store (server/store.py) and the group opening it."""
    cfg = StoreConfig(data_segment_bytes=64 << 10, index_segment_bytes=32 * 256, max_body_bytes=4096)
    s = NodeStore(tmp_path / "s", cfg)
    cuts: list[tuple[str, str]] = []
    s.on_cut = lambda kind, text: cuts.append((kind, text))
    s.append([b"e%d" % i for i in range(5)], 1)
    s.truncate_after(2)
    s.truncate_after(2)  # nothing past 2 any more: nothing to tell
    assert cuts == [(RESET, "log truncated after entry 2 to match the leader's: 2 entries dropped")]
    s.reset(100, s.write_pos + 4096, 0, 3)
    assert cuts[-1] == (RESET, "log reset to start at the leader's first entry 100") and s.begin_index == 100
    s.close()

    data = tmp_path / "node"
    g = GroupConfig("g0", {"n0": "127.0.0.1:1"}, store=cfg)
    s = NodeStore(store_dir(data, "g0", "n0"), cfg)
    s.append([b"x"] * 50, 1)
    s.close()
    for unit in Path(store_dir(data, "g0", "n0"), "index").iterdir():  # lost index: rebuilt from the data
        unit.unlink()

    async def open_group() -> list[dict[str, Any]]:
        events = Events()
        group = Group("n0", g, str(data), lambda m: None, lambda e: None, events=events)
        await group.close()
        return events.recent()

    recent = asyncio.run(open_group())
    assert recent and all(e["kind"] == "recovery" and e["group"] == "g0" for e in recent)
    assert any("store recovery at start: rebuilt" in e["text"] for e in recent), recent


def test_a_follower_behind_in_three_polls_in_a_row_is_marked_lagging(tmp_path: Path) -> None:
    """The cluster document from members' status documents (as STATUS brings them): a burst of lag is
    not flagged, a follower behind poll after poll is; with no leader there is no lag to judge."""
    peers = {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"}

    def docs(t: float, lag: int, leader: bool = True) -> dict[str, NodeDoc]:
        lead = GroupDoc("g0", "n0", role="leader" if leader else "candidate", term=2, end=10_000,
                        peer_lag={"n1": 0, "n2": lag})
        out = {"n0": NodeDoc("n0", uptime_s=t, groups={"g0": lead})}
        for n, behind in (("n1", 0), ("n2", lag)):
            follower = GroupDoc("g0", n, role="follower", term=2, end=10_000 - behind)
            out[n] = NodeDoc(n, uptime_s=t, groups={"g0": follower})
        return out

    async def polls() -> list[tuple[int | None, bool]]:
        view = ClusterView(NodeServer(NodeConfig("n0", tmp_path, (GroupConfig("g0", peers),))))
        seen = []
        for t, lag, has_leader in ((1, 5000, True), (2, 0, True), (3, 5000, True), (4, 5000, True),
                                   (5, 5000, True), (6, 5000, False), (7, 20, True)):
            doc = view._document(list(peers), docs(t, lag, has_leader), {})
            row = group(doc)["replicas"][2]
            seen.append((row["lag"], row["lagging"]))
        return seen

    assert asyncio.run(polls()) == [(5000, False), (0, False), (5000, False), (5000, False), (5000, True),
                                    (None, False), (20, False)]


def test_events_of_one_millisecond_keep_their_order_and_a_member_that_goes_away_gets_an_event(
        tmp_path: Path) -> None:
    """A node records several events within one millisecond (a role change and its election, say): the page
    lists them newest first, so the tie must not put them back in their recording order. A member down at the
    first look, or gone from the membership, gets an event of its own (the list of nodes alone says neither)."""
    peers = {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"}
    texts = ("candidate in term 2: asking for votes", "became leader in term 2", "leadership transfer: done")
    same = [{"t": 5.0, "kind": "election", "group": "g0", "text": text, "count": 1} for text in texts]
    docs = {"n0": NodeDoc("n0", uptime_s=1, events=[{"t": 4.0, "kind": "node", "group": None, "text": "started",
                                                     "count": 1}, *same]),
            "n1": NodeDoc("n1", uptime_s=1)}

    async def polls() -> tuple[list[str], list[str]]:
        view = ClusterView(NodeServer(NodeConfig("n0", tmp_path, (GroupConfig("g0", peers),))))
        view._note_up_down(list(peers), docs, {"n2": "connection refused"})
        doc = view._document(list(peers), docs, {"n2": "connection refused"})
        first = [e["text"] for e in doc["events"]]
        view._note_up_down(["n0", "n1"], docs, {})  # n2 left the membership
        return first, [e["text"] for e in view._document(["n0", "n1"], docs, {})["events"]]

    first, later = asyncio.run(polls())
    assert first[0] == "seen from n0: n2 is down: connection refused"
    assert first[1:] == [*reversed(texts), "started"]
    assert later[0] == "seen from n0: n2 is no longer a member"


# -- membership changes --------------------------------------------------------------------------------

def test_a_groups_configuration_is_read_from_the_status_document() -> None:
    """A Raft group's configuration and pending change as STATUS has them (server/members.py's status keys
    "config", "change_pending", "change_asked"), checked field by field: a voter also named a learner is a
    voter, and a configuration that is not one reads as unknown, its pending change with it."""
    def group_doc(g: dict[str, Any]) -> GroupDoc:
        return parse_status("n0", {"node": "n0", "groups": {"g0": g}}).groups["g0"]

    g = group_doc({"role": "leader", "config": {"voters": ["n2", "n0", "n1", "n0"], "learners": ["n3", "n1"],
                                                "addresses": {"n3": "10.0.0.4:9000"}},
                   "change_pending": True, "change_asked": 41})
    assert g.voters == ("n0", "n1", "n2") and g.learners == ("n3",)
    assert g.change_pending and g.change_asked == 41
    g = group_doc({"config": {"voters": ["n0"], "learners": []}, "change_pending": 1, "change_asked": -3})
    assert g.voters == ("n0",) and g.learners == () and not g.change_pending and g.change_asked is None
    # A primary/backup group (no "config"), and configurations that are none: unknown, nothing pending.
    bad: Any
    for bad in (None, {}, {"voters": [], "learners": []}, {"voters": ["n0", 7], "learners": []},
                {"voters": "n0", "learners": []}, {"voters": ["n0"]}, {"voters": ["n0"], "learners": [""]},
                {"voters": ["n0" * 200], "learners": []}, ["n0"]):
        g = group_doc({"config": bad, "change_pending": True, "change_asked": 5})
        assert g.voters is None and g.learners == () and not g.change_pending and g.change_asked is None, bad
    many = group_doc({"config": {"voters": [f"m{i:03}" for i in range(1000)], "learners": []}})
    assert many.voters is not None and len(many.voters) == 64


def test_a_raft_groups_replicas_are_its_configuration_with_learners_marked(tmp_path: Path) -> None:
    """The cluster document shows a Raft group's members as its leader's configuration has them, not as this
    node's config file lists them: a learner added is shown and marked (down or up), a member removed is
    not shown, a pending change is said; with no leader, this node's own view; a leader that leads its own
    removal out is still shown until it commits."""
    peers = {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"}

    def member(node: str, role: str, voters: tuple[str, ...] | None, learners: tuple[str, ...] = (),
               pending: bool = False, term: int = 3) -> NodeDoc:
        g = GroupDoc("g0", node, role=role, term=term, end=100, voters=voters, learners=learners,
                     change_pending=pending, change_asked=100 if pending and role == "leader" else None)
        return NodeDoc(node, uptime_s=1, groups={"g0": g})

    async def documents() -> list[dict[str, Any]]:
        view = ClusterView(NodeServer(NodeConfig("n0", tmp_path, (GroupConfig("g0", peers),))))
        grown = ("n0", "n1", "n2")
        out = []
        # n1 leads and has appended "add learner n3" (pending); n0 has not received it yet; n3 is down.
        docs = {"n0": member("n0", "follower", grown), "n1": member("n1", "leader", grown, ("n3",), True),
                "n2": member("n2", "follower", grown, ("n3",), True)}
        out.append(view._document([*peers, "n3"], docs, {"n3": "connection refused"}))
        # Committed; n3 is up and follows. Then n2 removed: n2 still runs, no longer a member.
        docs = {n: member(n, "leader" if n == "n1" else "follower", grown, ("n3",)) for n in (*peers, "n3")}
        out.append(view._document([*peers, "n3"], docs, {}))
        shrunk = ("n0", "n1")
        docs = {n: member(n, "leader" if n == "n1" else "follower", shrunk, ("n3",)) for n in ("n0", "n1", "n3")}
        docs["n2"] = member("n2", "follower", grown, ("n3",))
        out.append(view._document([*peers, "n3"], docs, {}))
        # No leader: this node's own view (n0's). Then n1 leads its own removal out (appended, pending).
        docs = {n: member(n, "candidate", shrunk, ("n3",)) for n in ("n0", "n1", "n3")}
        docs["n1"] = member("n1", "candidate", ("n0", "n1", "n3"))
        out.append(view._document(["n0", "n1", "n3"], docs, {}))
        docs = {"n0": member("n0", "follower", ("n0", "n3"), (), True), "n3": member("n3", "follower", shrunk, ("n3",)),
                "n1": member("n1", "leader", ("n0", "n3"), (), True)}
        out.append(view._document(["n0", "n1", "n3"], docs, {}))
        return out

    pending, grown, removed, leaderless, leaving = (group(d) for d in asyncio.run(documents()))
    assert [(r["node"], r["learner"], r["up"]) for r in pending["replicas"]] == [
        ("n0", False, True), ("n1", False, True), ("n2", False, True), ("n3", True, False)]
    assert pending["replicas"][3] == {"node": "n3", "up": False, "missing": False, "learner": True}
    assert pending["voters"] == ["n0", "n1", "n2"] and pending["learners"] == ["n3"]
    assert pending["change_pending"] is True and pending["change_asked"] == 100 and pending["leader"] == "n1"
    assert [(r["node"], r["learner"], r["role"]) for r in grown["replicas"]] == [
        ("n0", False, "follower"), ("n1", False, "leader"), ("n2", False, "follower"), ("n3", True, "follower")]
    assert grown["change_pending"] is False and grown["change_asked"] is None
    assert [r["node"] for r in removed["replicas"]] == ["n0", "n1", "n3"] and removed["voters"] == ["n0", "n1"]
    assert leaderless["leader"] is None and leaderless["voters"] == ["n0", "n1"] and leaderless["learners"] == ["n3"]
    assert [r["node"] for r in leaving["replicas"]] == ["n0", "n1", "n3"] and leaving["leader"] == "n1"
    assert leaving["voters"] == ["n0", "n3"] and leaving["learners"] == [] and leaving["change_pending"] is True


def test_a_primary_backup_group_keeps_its_configured_members(tmp_path: Path) -> None:
    """No configuration in the documents (primary/backup, or a member of an older version): the replicas are
    the configured peers, none a learner, no change pending."""
    peers = {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"}
    docs = {n: NodeDoc(n, uptime_s=1, groups={"g0": GroupDoc("g0", n, role="leader" if n == "n0" else "follower",
                                                             term=2, replication="primary-backup")})
            for n in ("n0", "n1")}

    async def document() -> dict[str, Any]:
        view = ClusterView(NodeServer(NodeConfig("n0", tmp_path, (GroupConfig("g0", peers),))))
        return view._document(list(peers), docs, {"n2": "down"})

    g = group(asyncio.run(document()))
    assert [(r["node"], r["up"], r["learner"]) for r in g["replicas"]] == [
        ("n0", True, False), ("n1", True, False), ("n2", False, False)]
    assert g["voters"] is None and g["learners"] == [] and g["change_pending"] is False


def _pause_followers_and_add(cluster: LocalCluster, c: Client, leader: str, spare: LocalNode) -> Any:
    """Kill the leader's followers and ask it to add `spare` as a learner (answered once committed); returns
    the pending answer and the followers' indexes, to start them again."""
    followers = [i for i, n in enumerate(cluster.members) if n.node_id != leader]
    for i in followers:
        cluster.kill(i)
    pool = ThreadPoolExecutor(1)
    asked = pool.submit(c.add_member, spare.node_id, spare.address, learner=True, timeout=60)
    pool.shutdown(wait=False)
    return asked, followers


def test_cluster_api_follows_membership_changes(cluster_factory: Any) -> None:
    """A spare added as a learner while the leader's followers are down: its change pending (in force on the
    leader, which shows the learner at once), then committed; the spare promoted; a member removed, which
    leaves the page (with an event); and every step's MEMBERS events, of kind "members"."""
    # Without check-quorum the leader keeps leading, and the change stays asked of it, while its followers are down.
    cluster: LocalCluster = cluster_factory(nodes=4, spares=1, raft={**FAST_RAFT, "check_quorum": False})
    spare = cluster.nodes[3]
    with Client(",".join(n.address for n in cluster.members), group="g0", retry_timeout=60) as c:
        c.append(b"first")
        leader = wait_until(lambda: c.metadata(with_nodes=False).leader, 10, "the leader")
        served = next(n for n in cluster.nodes if n.node_id == leader)
        doc = wait_api(served, all_following_the_leader, 30, "every node up and following the leader")
        g = group(doc)
        assert [r["node"] for r in g["replicas"]] == ["n0", "n1", "n2"] and g["voters"] == ["n0", "n1", "n2"]
        assert not any(r["learner"] for r in g["replicas"]) and g["change_pending"] is False

        asked, followers = _pause_followers_and_add(cluster, c, leader, spare)
        doc = wait_api(served, lambda d: group(d)["change_pending"] and group(d)["learners"] == ["n3"], 20,
                       "the learner shown, its change pending")
        g = group(doc)
        assert [(r["node"], r["learner"]) for r in g["replicas"]] == [
            ("n0", False), ("n1", False), ("n2", False), ("n3", True)]
        assert g["change_asked"] is not None and "n3" in [n["id"] for n in doc["nodes"]]
        for i in followers:
            cluster.start(i)
        assert asked.result(90).learners == ["n3"]
        doc = wait_api(served, lambda d: not group(d)["change_pending"] and all(
            r["up"] and not r.get("missing") for r in group(d)["replicas"]), 30, "the change committed, n3 up")
        assert next(r for r in group(doc)["replicas"] if r["node"] == "n3")["learner"] is True

        c.promote_member("n3", timeout=60)
        doc = wait_api(served, lambda d: group(d)["voters"] == ["n0", "n1", "n2", "n3"], 20, "n3 a voter")
        assert group(doc)["learners"] == [] and not any(r["learner"] for r in group(doc)["replicas"])

        # A follower leaves (not the node serving the page, nor the leader, whose events record the removal).
        now = wait_until(lambda: c.metadata(with_nodes=False).leader, 10, "the leader")
        gone = next(n.node_id for n in cluster.members if n.node_id not in (leader, now))
        c.remove_member(gone)

        def removed(d: dict[str, Any]) -> bool:
            texts = [e["text"] for e in d["events"] if e["kind"] == "members"]
            return (gone not in [r["node"] for r in group(d)["replicas"]] and gone not in [n["id"] for n in d["nodes"]]
                    and any(t.startswith(f"members: remove {gone} committed") for t in texts))

        doc = wait_api(served, removed, 20, f"{gone} gone from the page, its removal among the events")
        assert any(e["kind"] == "node" and e["text"].endswith(f"{gone} is no longer a member") for e in doc["events"])
        texts = [e["text"] for e in doc["events"] if e["kind"] == "members"]  # (any node's: leadership may move)
        assert any(t.startswith("members: add n3 at") and "committed" in t for t in texts), texts
        assert any(t.startswith("members: promote n3 committed") for t in texts), texts
        assert any(t.startswith("configuration: voters") for t in texts), texts


def test_page_marks_learners_a_pending_change_and_members_events(cluster_factory: Any, browser: Any) -> None:
    cluster: LocalCluster = cluster_factory(nodes=4, spares=1, raft={**FAST_RAFT, "check_quorum": False})
    spare = cluster.nodes[3]
    with Client(",".join(n.address for n in cluster.members), group="g0", retry_timeout=60) as c:
        c.append(b"first")
        leader = wait_until(lambda: c.metadata(with_nodes=False).leader, 10, "the leader")
        served = next(n for n in cluster.nodes if n.node_id == leader)
        wait_api(served, all_following_the_leader, 30, "every node up and following the leader")
        browser.get(served.admin_url + "/")
        wait_page(browser, lambda s: s["leader"] == leader and len(s["rows"]) == 3, 15, "the page")
        asked, followers = _pause_followers_and_add(cluster, c, leader, spare)
        marks = """
        const g0 = document.querySelector('section.group[data-group="g0"]');
        return g0 ? [g0.dataset.changePending, g0.querySelector('.panel-head .pending') !== null,
                     [...g0.querySelectorAll('tbody tr[data-learner="true"]')].map((r) => r.dataset.node),
                     [...document.querySelectorAll('#events tr[data-kind="members"] .kind.k-members')].length > 0]
                  : null;
        """
        wait_until(lambda: browser.execute_script(marks) == ["true", True, ["n3"], True], 20,
                   "the learner marked, the change pending, members events styled")
        assert "learner" in browser.find_element("css selector", 'tr[data-node="n3"]').text
        for i in followers:
            cluster.start(i)
        asked.result(90)
        wait_until(lambda: browser.execute_script(marks) == ["false", False, ["n3"], True], 30,
                   "the change committed on the page")
        buttons = [b.text for b in browser.find_elements("css selector", "#event-filter button")]
        assert "members" in buttons
