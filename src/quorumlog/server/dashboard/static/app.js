// quorumlog dashboard: polls /api/cluster once a second and redraws the page from it.
// Every string from the document goes in through textContent or setAttribute, never as markup:
// node ids, group names and event texts come from the network.
// A node with an admin token answers 401 without it: the page asks for it once and keeps it in this
// tab's sessionStorage, sending it as a bearer header.
"use strict";

const POLL_MS = 1000;
const TOKEN_KEY = "quorumlog.admin-token";
const FETCH_TIMEOUT_MS = 5000;
const EVENT_ROWS = 60;
const KINDS = ["election", "transfer", "recovery", "reset", "refusal", "members", "node"];
const SVG = "http://www.w3.org/2000/svg";

let eventFilter = "all";
let last = null;

// -- DOM helpers ---------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

// -- formatting ----------------------------------------------------------------------------------

function num(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US");
}

function rate(n) {
  if (n === null || n === undefined) return "–";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + "M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(1);
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (n >= 100 || i === 0 ? Math.round(n) : n.toFixed(1)) + " " + units[i];
}

function perSecond(n) {
  return n === null || n === undefined ? "–" : bytes(n) + "/s";
}

function seconds(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1e-3) return Math.round(s * 1e6) + " µs";
  if (s < 1) return +(s * 1e3).toPrecision(3) + " ms";
  return +s.toPrecision(3) + " s";
}

function pair(q) {
  // a latency's p50 / p99 ("–" when nothing was observed lately; "> 10 s" above the largest bucket)
  if (!q) return "–";
  const hi = q.p99 === null ? "> 10 s" : seconds(q.p99);
  return (q.p50 === null ? "> 10 s" : seconds(q.p50)) + " / " + hi;
}

function uptime(s) {
  if (s === null || s === undefined) return "–";
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + m + "m";
  return m + "m " + (s % 60) + "s";
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString("en-GB", { hour12: false });
}

// -- sparklines ----------------------------------------------------------------------------------

function sparkline(points, kind, width, height, fmt) {
  const s = svg("svg", { class: "spark " + kind, width, height, viewBox: `0 0 ${width} ${height}` });
  s.append(svg("line", { class: "base", x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5 }));
  const vals = (points || []).map((v) => (typeof v === "number" && isFinite(v) ? v : null));
  const max = Math.max(0, ...vals.filter((v) => v !== null));
  const title = document.createElementNS(SVG, "title");
  title.textContent = `last ${vals.length} s, peak ${fmt(max)}`;
  s.append(title);
  if (vals.length < 2 || max <= 0) return s;
  const step = width / (Math.max(vals.length, 30) - 1);
  const x0 = width - step * (vals.length - 1);
  // one polyline per run of known values: a gap (no leader, a node down) stays a gap
  let run = [];
  const flush = () => {
    if (run.length > 1) {
      const pts = run.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
      const area = `${run[0][0].toFixed(1)},${height} ${pts} ${run[run.length - 1][0].toFixed(1)},${height}`;
      s.append(svg("polygon", { class: "area", points: area }));
      s.append(svg("polyline", { class: "line", points: pts }));
    }
    run = [];
  };
  vals.forEach((v, i) => {
    if (v === null) { flush(); return; }
    run.push([x0 + i * step, height - 1 - (v / max) * (height - 3)]);
  });
  flush();
  return s;
}

// -- rendering -----------------------------------------------------------------------------------

function renderHeader(doc) {
  const up = doc.nodes.filter((n) => n.up).length;
  const led = doc.groups.filter((g) => g.leader).length;
  const summary = document.getElementById("summary");
  summary.textContent = `${up}/${doc.nodes.length} nodes up · ${led}/${doc.groups.length} groups with a leader`;
  summary.className = up === doc.nodes.length && led === doc.groups.length ? "" : "alert";
  document.getElementById("cluster-name").textContent = "cluster " + doc.cluster;
  document.getElementById("served-by").textContent = "served by " + doc.served_by;
  document.getElementById("updated").textContent = "updated " + clock(doc.generated_at);
  document.title = "quorumlog · " + doc.cluster;
  document.body.dataset.servedBy = doc.served_by;
}

function renderNodes(doc) {
  const cards = doc.nodes.map((n) => {
    const leads = n.leads || [];
    const state = n.up ? "up" : "down";
    const card = el("article", { class: "node", "data-node": n.id, "data-state": state,
      "data-leader": leads.length > 0 ? "true" : "false" },
      el("div", { class: "title" },
        leads.length ? el("span", { class: "crown", title: "leader" }, "★") : null,
        el("span", { class: "id" }, n.id),
        el("span", { class: "state " + state }, state.toUpperCase()),
        n.self ? el("span", { class: "you" }, "(this node)") : null),
      el("div", { class: "addr" }, n.address));
    if (n.up) {
      const lag = n.loop_lag_s;
      card.append(el("dl", { class: "stats" },
        el("dt", {}, "uptime"), el("dd", {}, uptime(n.uptime_s)),
        el("dt", { title: "how late the node's event loop runs a timer: p50 / p99 over the last 10 s" },
          "loop lag"), el("dd", {}, pair(lag)),
        el("dt", {}, "leads"), el("dd", { class: leads.length ? "leads" : "dim" },
          leads.length ? leads.join(", ") : "—")));
    } else {
      card.append(el("div", { class: "error" }, n.error || "not reachable"));
    }
    return card;
  });
  document.getElementById("nodes").replaceChildren(...cards);
}

function rateBlock(label, value, spark, kind, fmt) {
  return el("div", { class: "rate" },
    el("span", { class: "num" }, fmt(value)),
    el("span", { class: "unit" }, label),
    sparkline(spark, kind, 150, 30, fmt));
}

const COLUMNS = ["node", "role", "term", "begin", "end", "committed", "durable", "lag", "pending",
  "appends/s", "bytes/s", "fsync p50 / p99", "commit p50 / p99"];

function learnerBadge(r) {
  // a Raft learner: it receives the log, but neither votes nor counts towards a commit
  return r.learner ? el("span", { class: "badge learner", title: "receives the log; no vote, not counted "
    + "for commits (promoted to voter once caught up)" }, "learner") : null;
}

function replicaRow(g, r) {
  const learner = r.learner ? "true" : "false";
  if (!r.up || r.missing) {
    const text = r.up ? "up, but does not host this group (check its config)" : "down";
    return el("tr", { "data-node": r.node, "data-group": g.name, "data-state": r.up ? "missing" : "down",
      "data-role": "none", "data-learner": learner },
      el("td", {}, r.node, learnerBadge(r)), el("td", { colspan: COLUMNS.length - 1 }, text));
  }
  const role = r.role || "unknown";
  const isLeader = role === "leader";
  const pb = g.replication === "primary-backup";
  const shown = pb && role === "leader" ? "primary" : pb && role === "follower" ? "backup" : role;
  return el("tr", { "data-node": r.node, "data-group": g.name, "data-state": "up", "data-role": role,
    "data-lagging": r.lagging ? "true" : "false", "data-learner": learner },
    el("td", {}, isLeader ? el("span", { class: "crown" }, "★ ") : null, r.node),
    el("td", {}, el("span", { class: "role " + role }, shown), learnerBadge(r),
      r.recovering ? el("span", { class: "badge" }, "recovering") : null,
      r.lagging ? el("span", { class: "badge" }, "lagging") : null),
    el("td", {}, num(r.term)),
    el("td", {}, num(r.begin)),
    el("td", {}, num(r.end)),
    el("td", {}, num(r.committed)),
    el("td", {}, num(r.durable)),
    el("td", { class: "lag" }, r.lag === null || r.lag === undefined ? "–" : num(r.lag)),
    el("td", {}, num(r.pending)),
    el("td", {}, rate(r.entries_s)),
    el("td", {}, perSecond(r.bytes_s)),
    el("td", {}, pair(r.fsync_s)),
    el("td", {}, pair(r.commit_s)));
}

function membersInfo(g) {
  // a Raft group's configuration, as its leader (else the serving node) follows it
  if (!Array.isArray(g.voters)) return null;
  const learners = g.learners || [];
  return el("span", { class: "info members" }, "voters ", el("b", {}, String(g.voters.length)),
    learners.length ? " · learners " : null,
    learners.length ? el("b", { class: "learners" }, learners.join(", ")) : null);
}

function renderGroups(doc) {
  const panels = doc.groups.map((g) => {
    const spark = g.spark || {};
    const pb = g.replication === "primary-backup";
    const head = el("div", { class: "panel-head" },
      el("h2", {}, "group " + g.name),
      el("span", { class: "info" }, g.replication),
      g.leader
        ? el("span", { class: "info" }, pb ? "primary " : "leader ", el("b", { class: "crown" }, "★ " + g.leader))
        : el("span", { class: "noleader" }, pb ? "no primary" : "no leader"),
      el("span", { class: "info" }, pb ? "epoch " : "term ", el("b", {}, num(g.term))),
      membersInfo(g),
      g.change_pending
        ? el("span", { class: "pending", title: "the last CONFIG entry is not committed yet: the change is in "
          + "force on the members that hold it, and the leader takes no other until it commits" },
          "membership change pending" + (g.change_asked !== null && g.change_asked !== undefined
            ? " (entry " + num(g.change_asked) + ")" : ""))
        : null,
      rateBlock("appends/s", g.entries_s, spark.entries_s, "entries", rate),
      rateBlock("appended", g.bytes_s, spark.bytes_s, "bytes", perSecond));
    const table = el("table", {},
      el("thead", {}, el("tr", {}, ...COLUMNS.map((c) => el("th", {}, c)))),
      el("tbody", {}, ...g.replicas.map((r) => replicaRow(g, r))));
    return el("section", { class: "panel group", "data-group": g.name, "data-leader": g.leader || "",
      "data-change-pending": g.change_pending ? "true" : "false" }, head, table);
  });
  document.getElementById("groups").replaceChildren(...panels);
}

function renderFilter() {
  const box = document.getElementById("event-filter");
  const buttons = ["all", ...KINDS].map((k) => {
    const b = el("button", { type: "button", "aria-pressed": k === eventFilter ? "true" : "false" }, k);
    b.addEventListener("click", () => {
      eventFilter = k;
      renderFilter();
      if (last) renderEvents(last);
    });
    return b;
  });
  box.replaceChildren(...buttons);
}

function renderEvents(doc) {
  const shown = doc.events.filter((e) => eventFilter === "all" || e.kind === eventFilter).slice(0, EVENT_ROWS);
  const rows = shown.map((e) => el("tr", { "data-kind": e.kind, "data-node": e.node },
    el("td", {}, clock(e.t)),
    el("td", {}, e.node),
    el("td", {}, el("span", { class: "kind k-" + (KINDS.includes(e.kind) ? e.kind : "other") }, e.kind)),
    el("td", {}, e.group || ""),
    el("td", {}, e.text, e.count > 1 ? el("span", { class: "count" }, "×" + e.count) : null)));
  if (!rows.length) rows.push(el("tr", {}, el("td", { class: "empty", colspan: 5 }, "no events")));
  document.getElementById("events").replaceChildren(...rows);
}

function render(doc) {
  renderHeader(doc);
  renderNodes(doc);
  renderGroups(doc);
  renderEvents(doc);
}

// -- the admin token -----------------------------------------------------------------------------

let asking = false;

function askToken(error) {
  asking = true;
  last = null;
  document.body.dataset.state = "login";
  const c = document.getElementById("conn");
  c.textContent = "admin token required";
  c.className = "pill bad";
  document.getElementById("login-error").textContent = error || "";
  document.getElementById("login").hidden = false;
  document.getElementById("token").focus();
}

function tokenGiven(event) {
  event.preventDefault();
  const input = document.getElementById("token");
  const token = input.value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  input.value = "";
  document.getElementById("login").hidden = true;
  document.body.dataset.state = "loading";
  asking = false;
  poll();
}

// -- polling -------------------------------------------------------------------------------------

function setConn(ok, text) {
  const c = document.getElementById("conn");
  c.textContent = text;
  c.className = "pill " + (ok ? "ok" : "bad");
  document.body.dataset.state = ok ? "live" : "stale";
}

async function poll() {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
  const token = sessionStorage.getItem(TOKEN_KEY);
  try {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const res = await fetch("/api/cluster", { cache: "no-store", signal: ctl.signal, headers });
    if (res.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      askToken(token ? "that token was refused" : null);
      return;
    }
    if (!res.ok) throw new Error("HTTP " + res.status);
    last = await res.json();
    render(last);
    setConn(true, "live");
  } catch (err) {
    setConn(false, "no answer from this node: " + (err && err.message ? err.message : err));
  } finally {
    clearTimeout(timer);
    if (!asking) setTimeout(poll, POLL_MS);
  }
}

document.getElementById("login").addEventListener("submit", tokenGiven);
renderFilter();
poll();
