// gpujob dashboard. Every value a host sent is put into the page as text (textContent or a
// text node), never as markup: job output is untrusted.
"use strict";

const TOKEN = document.querySelector('meta[name="gpujob-token"]').content;
const main = document.getElementById("main");
const COLORS = ["#1f6feb", "#d1242f", "#1a7f37", "#8250df", "#bf8700", "#0a7ea4", "#cf222e", "#57606a", "#e16f24", "#2da44e", "#6639ba", "#953800"];

function el(tag, attrs, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") n.className = v;
    else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined) continue;
    n.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return n;
}

function fmt(v, digits) {
  if (v === null || v === undefined || v === "") return "-";
  if (typeof v === "number") {
    if (!isFinite(v)) return String(v);
    if (Number.isInteger(v)) return String(v);
    return Math.abs(v) >= 1000 || Math.abs(v) < 0.001 ? v.toExponential(2) : v.toFixed(digits === undefined ? 4 : digits);
  }
  return String(v);
}

function dur(s) {
  if (typeof s !== "number") return fmt(s);
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(sec).padStart(2, "0")}s` : `${sec}s`;
}

function money(v, currency) {
  if (typeof v !== "number") return fmt(v);  // "inf", "nan": a non-finite figure comes as its word
  return `${v > 0 && v < 0.01 ? "<0.01" : v.toFixed(2)} ${currency || ""}`;
}

function when(t) { return t ? new Date(t * 1000).toLocaleString() : "-"; }

function jobHref(host, id) { return "/job?" + new URLSearchParams({ host, id }); }

function live(on) { document.getElementById("live").classList.toggle("on", on); }

function sparkline(vals) {
  const NS = "http://www.w3.org/2000/svg", w = 90, h = 18;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", "spark"); svg.setAttribute("width", w); svg.setAttribute("height", h);
  vals = (vals || []).filter((v) => typeof v === "number");  // a diverged point ("nan") is left out
  if (vals.length < 2) return svg;
  const lo = Math.min(...vals), hi = Math.max(...vals), span = hi - lo || 1;
  const pts = vals.map((v, i) => `${(i / (vals.length - 1) * (w - 2) + 1).toFixed(1)},${(h - 1 - (v - lo) / span * (h - 2)).toFixed(1)}`);
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", pts.join(" ")); line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#1f6feb"); line.setAttribute("stroke-width", "1.5");
  svg.appendChild(line);
  return svg;
}

function stream(url, handlers) {
  const es = new EventSource(url);
  es.onopen = () => live(true);
  es.onerror = () => live(false);
  for (const [ev, fn] of Object.entries(handlers)) es.addEventListener(ev, (e) => fn(JSON.parse(e.data), e));
  return es;
}

async function post(path, host, id) {
  const r = await fetch(path + "?" + new URLSearchParams({ host, id }), { method: "POST", headers: { "X-Token": TOKEN } });
  const doc = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) throw new Error(doc.error + (doc.remedy ? ` (${doc.remedy})` : ""));
  return doc;
}

// ---- jobs ------------------------------------------------------------------------------------
const COLUMNS = [
  ["job_id", "Job"], ["host", "Host"], ["state", "State"], ["step", "Step"], ["eta_s", "ETA"],
  ["loss", "Loss"], ["spark", "Trend"], ["gpu", "GPU %"], ["cost", "Cost"], ["diagnosis", "Diagnosis"],
];

function jobsView() {
  const selected = new Set();
  let rows = [], sortKey = "submitted_at", asc = false;
  const filter = el("input", { type: "search", id: "filter", placeholder: "filter: job, host, state, diagnosis…" });
  const stateSel = el("select", { id: "state-filter" }, ["all", "running", "queued", "finished", "failed"].map((s) => el("option", { value: s }, s)));
  const compareBtn = el("button", { id: "compare", onclick: () => {
    if (selected.size) location.href = "/compare?" + new URLSearchParams({ runs: [...selected].join(",") });
  } }, "Compare selected");
  const errors = el("div", { class: "errors", id: "host-errors" });
  const count = el("span", { class: "muted", id: "count" });
  const head = el("tr", {}, el("th", {}, ""), COLUMNS.map(([k, label]) => el("th", { "data-key": k, onclick: () => {
    if (sortKey === k) asc = !asc; else { sortKey = k; asc = true; }
    render();
  } }, label)));
  const body = el("tbody");
  main.replaceChildren(el("h1", {}, "Jobs"), el("div", { class: "toolbar" }, filter, stateSel, compareBtn, count), errors,
    el("table", { id: "jobs" }, el("thead", {}, head), body));
  filter.addEventListener("input", render);
  stateSel.addEventListener("change", render);

  function keep(r) {
    const st = stateSel.value, q = filter.value.trim().toLowerCase();
    if (st === "running" && !["running", "restarting"].includes(r.state)) return false;
    if (st === "queued" && r.state !== "queued") return false;
    if (st === "finished" && ["running", "restarting", "queued"].includes(r.state)) return false;
    if (st === "failed" && !["failed", "lost"].includes(r.state)) return false;
    return !q || [r.job_id, r.name, r.host, r.state, r.diagnosis, r.last_line].some((s) => (s || "").toLowerCase().includes(q));
  }

  function render() {
    const shown = rows.filter(keep).sort((a, b) => {
      const x = a[sortKey], y = b[sortKey];
      const c = x === y ? 0 : x === null || x === undefined ? 1 : y === null || y === undefined ? -1 : x < y ? -1 : 1;
      return asc ? c : -c;
    });
    for (const th of head.querySelectorAll("th[data-key]")) {
      th.classList.toggle("sorted", th.dataset.key === sortKey); th.classList.toggle("asc", asc);
    }
    count.textContent = `${shown.length} of ${rows.length}`;
    body.replaceChildren(...shown.map((r) => el("tr", { "data-key": r.key, "data-state": r.state },
      el("td", {}, el("input", { type: "checkbox", checked: selected.has(r.key), onchange: (e) => {
        if (e.target.checked) selected.add(r.key); else selected.delete(r.key);
      } })),
      el("td", {}, el("a", { href: jobHref(r.host, r.job_id) }, r.job_id)),
      el("td", {}, r.host),
      el("td", { class: `state state-${r.state}`, title: r.reason }, r.state),
      el("td", { class: "num" }, r.total ? `${fmt(r.step)}/${fmt(r.total)}` : fmt(r.step)),
      el("td", { class: "num" }, dur(r.eta_s)),
      el("td", { class: "num", title: r.loss_key }, fmt(r.loss)),
      el("td", {}, sparkline(r.spark)),
      el("td", { class: "num" }, fmt(r.gpu, 0)),
      el("td", { class: "num" }, money(r.cost, r.currency)),
      el("td", { class: "diag", title: r.last_line }, r.diagnosis || ""),
    )));
  }

  stream("/api/events", { jobs: (doc) => {
    rows = doc.jobs;
    errors.replaceChildren(...Object.entries(doc.errors).map(([h, e]) => el("div", {}, `${h}: ${e}`)));
    render();
  } });
}

// ---- one job ----------------------------------------------------------------------------------
function chartData(points) {
  const pts = points.filter((p) => typeof p[0] === "number").sort((a, b) => a[0] - b[0]);
  return [pts.map((p) => p[0]), pts.map((p) => (typeof p[1] === "number" ? p[1] : null))];
}

function chartWidth(box) { return Math.max(300, box.clientWidth - 14); }

function upsertChart(charts, box, key, series, labels) {
  // series: [[x...],[y...],[y...]...] already aligned; labels: one per y column
  let c = charts.get(key);
  if (!c) {
    const holder = el("div", { class: "chart", "data-metric": key });
    box.appendChild(holder);
    const opts = {
      title: key, width: chartWidth(box.querySelector(".chart") || box) || 460, height: 220,
      scales: { x: { time: false } }, legend: { show: labels.length > 1 },
      axes: [{}, { size: 60, values: (u, splits) => splits.map((v) => (v === null ? "" : String(Number(v.toPrecision(3))))) }],
      series: [{ label: "step" }, ...labels.map((l, i) => ({ label: l, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true }))],
    };
    c = { plot: new uPlot(opts, series, holder), holder };
    charts.set(key, c);
  } else {
    c.plot.setData(series);
  }
  const xs = series[0];
  c.holder.dataset.points = String(xs.length);
  c.holder.dataset.lastStep = xs.length ? String(xs[xs.length - 1]) : "";
}

function metaCell(label, value, id) { return el("div", { id }, el("b", {}, label), value); }

function jobView(q) {
  const host = q.get("host") || "", id = q.get("id") || "";
  const meta = el("div", { class: "meta", id: "meta" });
  const diag = el("div", { id: "diagnosis" });
  const result = el("span", { id: "action-result" });
  const act = (name, path, question) => el("button", { id: `btn-${name}`, class: name === "stop" ? "danger" : null, onclick: async () => {
    if (!confirm(question)) return;
    result.textContent = `${name}…`;
    try {
      const doc = await post(path, host, id);
      result.textContent = `${name}: ${doc.state || doc.dest || doc.job_id || "done"}`;
    } catch (e) { result.textContent = `${name} failed: ${e.message}`; }
  } }, name === "pull" ? "Pull latest" : name[0].toUpperCase() + name.slice(1));
  const charts = el("div", { class: "charts", id: "charts" });
  const ckpts = el("tbody"), attempts = el("tbody"), mirror = el("div", { id: "mirror", class: "muted" });
  const log = el("pre", { id: "log" });
  main.replaceChildren(
    el("h1", {}, id, el("span", { class: "muted" }, ` on ${host}`)), meta, diag,
    el("div", { class: "actions" },
      act("stop", "/api/job/stop", `Stop ${id} on ${host}? Its code may checkpoint first; resume continues from the newest checkpoint.`),
      act("resume", "/api/job/resume", `Resume ${id} on ${host} from its newest complete checkpoint?`),
      act("pull", "/api/job/pull", `Copy the newest complete checkpoint and the logs of ${id} here (pull --latest)?`),
      result),
    el("h2", {}, "Curves"), charts,
    el("h2", {}, "Log"), log,
    el("h2", {}, "Checkpoints"), mirror, el("table", { id: "checkpoints" }, el("thead", {}, el("tr", {}, ["name", "step", "complete", "mirror", "pulled here", "written"].map((h) => el("th", {}, h)))), ckpts),
    el("h2", {}, "Attempts"), el("table", { id: "attempts" }, el("thead", {}, el("tr", {}, ["#", "started", "ended", "exit", "resumed from", "diagnosis"].map((h) => el("th", {}, h)))), attempts));
  const plots = new Map();

  function showJob(snap) {
    const j = snap.job;
    if (!j) { meta.replaceChildren(el("div", {}, snap.error || "loading…")); return; }
    const m = j.latest_metrics || j.last_metrics || {}, bill = j.billing || {}, row = snap.row || {};
    meta.replaceChildren(
      metaCell("state", el("span", { class: `state state-${j.state}` }, j.state), "meta-state"),
      metaCell("step", j.max_steps || row.total ? `${fmt(m.step)}/${j.max_steps || row.total}` : fmt(m.step)),
      metaCell("loss", j.loss_key ? `${fmt(m[j.loss_key])} (${j.loss_key})` : "-"),
      metaCell("ETA", dur(j.eta_s ?? bill.eta_s ?? row.eta_s)), metaCell("elapsed", dur(j.elapsed_s)),
      metaCell("cost", money(j.cost ?? row.cost, bill.currency || row.currency)),
      metaCell("attempt", fmt(j.attempt)), metaCell("steps/s", fmt(j.steps_per_s ?? row.steps_per_s, 2)),
      metaCell("GPU", j.gpu && j.gpu.now ? j.gpu.now.map((g) => `${fmt(g.util, 0)}%`).join(" ") : "-"),
      metaCell("last line", (j.last_line || "").slice(0, 200)));
    if (snap.error) meta.appendChild(metaCell("error", snap.error));
    const d = j.diagnosis;
    diag.replaceChildren(...(d ? [el("div", { class: "diagnosis" }, [d.summary || d.cause, d.where ? `\nat ${d.where}` : "", d.line ? `\n${d.line}` : ""].join(""))] : []));
    for (const [k, pts] of Object.entries(j.series || {})) upsertChart(plots, charts, k, chartData(pts), [k]);
    mirror.replaceChildren(...(j.mirror_lines || []).map((line) => el("div", {}, line)));  // as `status` says it
    ckpts.replaceChildren(...(j.checkpoints || []).map((c) => el("tr", {},
      el("td", {}, c.name), el("td", { class: "num" }, fmt(c.step)), el("td", {}, c.complete ? "✓ complete" : "partial"),
      el("td", {}, c.mirror === undefined ? "-" : typeof c.mirror === "object" ? JSON.stringify(c.mirror) : String(c.mirror)),
      el("td", { class: "wrap" }, c.pulled || "-"),
      el("td", {}, when(c.mtime)))));
    attempts.replaceChildren(...(j.attempts || []).map((a, i, all) => el("tr", {},
      el("td", {}, fmt(a.n)), el("td", {}, when(a.started_at)), el("td", {}, when(a.ended_at)),
      el("td", {}, fmt(a.exit_code)), el("td", {}, a.resume || "-"),
      el("td", { class: "wrap" }, a.diagnosis ? (a.diagnosis.summary || a.diagnosis.cause || "") :
        i === all.length - 1 && d ? (d.summary || d.cause || "") : ""))));
  }

  // one stream: the job's status, and its log one line per event with the line's byte offset
  // as the event id (a reconnect resumes there)
  let seen = -1, ended = false;
  const es = stream("/api/job/stream?" + new URLSearchParams({ host, id }), {
    job: showJob,
    line: (doc) => {
      if (doc.offset <= seen) return;
      seen = doc.offset;
      ended = false;
      const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      log.appendChild(document.createTextNode(doc.line + "\n"));
      while (log.childNodes.length > 2000) log.removeChild(log.firstChild);
      if (atEnd) log.scrollTop = log.scrollHeight;
    },
    end: () => { if (!ended) log.appendChild(document.createTextNode("── end of log (the job ended) ──\n")); ended = true; },
    failed: (doc) => { log.appendChild(document.createTextNode(`── ${doc.error}${doc.remedy ? " → " + doc.remedy : ""} ──\n`)); },
  });
}

// ---- compare -----------------------------------------------------------------------------------
async function compareView(q) {
  const runs = q.get("runs") || "";
  main.replaceChildren(el("h1", {}, "Compare"));
  if (!runs) { main.appendChild(el("p", { class: "muted" }, "Tick two or more jobs on the Jobs page (or runs on the Runs page, removed ones too), then Compare selected.")); return; }
  main.appendChild(el("p", { class: "muted", id: "compare-loading" }, "loading…"));
  const r = await fetch("/api/compare?" + new URLSearchParams({ runs, source: q.get("source") || "jobs" }));
  const doc = await r.json();
  document.getElementById("compare-loading").remove();
  if (!r.ok) { main.appendChild(el("p", { class: "errors" }, doc.error + (doc.remedy ? ` (${doc.remedy})` : ""))); return; }
  const params = el("table", { id: "params" }, el("thead", {}, el("tr", {}, el("th", {}, "parameter"),
    doc.runs.map((run, i) => el("th", { style: `color:${COLORS[i % COLORS.length]}` }, run.key)))),
    el("tbody", {}, doc.differing.map((k) => el("tr", {}, el("td", {}, k),
      doc.runs.map((run) => el("td", { class: "wrap" }, run.params[k] === undefined ? "—" : typeof run.params[k] === "object" ? JSON.stringify(run.params[k]) : String(run.params[k])))))));
  const charts = el("div", { class: "charts", id: "charts" });
  main.append(el("h2", {}, "Parameters that differ"), doc.differing.length ? params : el("p", { class: "muted" }, "none"),
    el("h2", {}, "Curves"), charts);
  for (const run of doc.runs) if (run.error) main.insertBefore(el("p", { class: "errors" }, `${run.key}: ${run.error}`), charts);
  const metrics = [...new Set(doc.runs.flatMap((run) => Object.keys(run.series || {})))].sort();
  const plots = new Map();
  for (const k of metrics) {
    const tables = doc.runs.map((run) => chartData((run.series || {})[k] || []));
    upsertChart(plots, charts, k, uPlot.join(tables), doc.runs.map((run) => run.key));
  }
}

// ---- runs (the ledger: every run this laptop submitted, kept after rm/gc) ---------------------------
function cell(v) { return v === null || v === undefined ? "-" : typeof v === "object" ? JSON.stringify(v) : fmt(v); }

function runsView(q) {
  const selected = new Set();
  let runs = [], sortKey = null, asc = true;
  const name = el("input", { type: "search", id: "runs-name", placeholder: "name", value: q.get("name") || "" });
  const where = el("input", { type: "search", id: "runs-where", size: 36, placeholder: "where: lr<1e-3, state=succeeded", value: q.get("where") || "" });
  const sort = el("input", { type: "search", id: "runs-sort", placeholder: "sort: eval_loss, -accuracy", value: q.get("sort") || "" });
  const filter = el("input", { type: "search", id: "runs-filter", placeholder: "filter shown rows…" });
  const compareBtn = el("button", { id: "compare-runs", onclick: () => {
    if (selected.size) location.href = "/compare?" + new URLSearchParams({ source: "ledger", runs: [...selected].join(",") });
  } }, "Compare selected");
  const count = el("span", { class: "muted", id: "runs-count" });
  const errors = el("div", { class: "errors", id: "runs-error" });
  const table = el("table", { id: "runs" });
  const ask = el("button", { id: "runs-apply", onclick: () => load() }, "Apply");
  for (const i of [name, where, sort]) i.addEventListener("keydown", (e) => { if (e.key === "Enter") load(); });
  filter.addEventListener("input", render);
  main.replaceChildren(el("h1", {}, "Runs"), el("div", { class: "toolbar" }, name, where, sort, ask, filter, compareBtn, count), errors, table);

  async function load() {
    const args = new URLSearchParams({ name: name.value.trim(), sort: sort.value.trim() });
    for (const w of where.value.split(",")) if (w.trim()) args.append("where", w.trim());
    const r = await fetch("/api/runs?" + args);
    const doc = await r.json();
    if (!r.ok) { errors.textContent = doc.error + (doc.remedy ? ` (${doc.remedy})` : ""); return; }
    errors.textContent = "";
    runs = doc.runs.map((run) => ({ ...run, loss: (run.final || {})[run.loss_key || "loss"] }));
    count.textContent = `${runs.length} of ${doc.total}`;
    render();
  }

  function render() {
    // the parameters whose values vary among the runs listed get a column each
    const names = [...new Set(runs.flatMap((run) => Object.keys(run.params || {})))].sort();
    const varying = names.filter((k) => new Set(runs.map((run) => JSON.stringify((run.params || {})[k]))).size > 1);
    const cols = [["job_id", "Run"], ["name", "Name"], ["host", "Host"], ["state", "State"],
      ...varying.map((k) => [`p:${k}`, k]), ["loss", "Loss"], ["cost", "Cost"], ["submitted_at", "Submitted"]];
    const value = (run, k) => (k.startsWith("p:") ? (run.params || {})[k.slice(2)] : run[k]);
    const text = filter.value.trim().toLowerCase();
    const shown = runs.filter((run) => !text || JSON.stringify([run.job_id, run.name, run.host, run.state, run.params]).toLowerCase().includes(text));
    if (sortKey) shown.sort((a, b) => {
      const x = value(a, sortKey), y = value(b, sortKey);
      const c = x === y ? 0 : x === null || x === undefined ? 1 : y === null || y === undefined ? -1 : x < y ? -1 : 1;
      return asc ? c : -c;
    });
    table.replaceChildren(
      el("thead", {}, el("tr", {}, el("th", {}, ""), cols.map(([k, label]) => el("th", { "data-key": k, class: k === sortKey ? "sorted" + (asc ? " asc" : "") : null, onclick: () => {
        if (sortKey === k) asc = !asc; else { sortKey = k; asc = true; }
        render();
      } }, label)))),
      el("tbody", {}, shown.map((run) => el("tr", { "data-key": run.job_id, "data-state": run.state },
        el("td", {}, el("input", { type: "checkbox", checked: selected.has(run.job_id), onchange: (e) => {
          if (e.target.checked) selected.add(run.job_id); else selected.delete(run.job_id);
        } })),
        cols.map(([k]) => k === "submitted_at" ? el("td", {}, when(run[k])) : k === "cost" ? el("td", { class: "num" }, money(run.cost, run.currency))
          : k === "state" ? el("td", { class: `state state-${run.state}` }, run.state) : el("td", { class: typeof value(run, k) === "number" ? "num" : null }, cell(value(run, k))))))));
  }
  load();
}

const q = new URLSearchParams(location.search);
if (location.pathname === "/job") jobView(q);
else if (location.pathname === "/runs") runsView(q);
else if (location.pathname === "/compare") compareView(q);
else jobsView();
