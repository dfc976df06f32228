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

// a local time whole in a narrow column: "2026-12-07 15:27:14" (the locale's own form is its tooltip)
function stamp(t) {
  if (!t) return "-";
  const d = new Date(t * 1000), two = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

function jobHref(host, id) { return "/job?" + new URLSearchParams({ host, id }); }

function live(on) { document.getElementById("live").classList.toggle("on", on); }

// lo, hi: the scale, when the sparkline stands beside others of the same metric (compare: one
// scale for all, so a flat curve looks flat); else its own values' range
function sparkline(vals, lo, hi, color) {
  const NS = "http://www.w3.org/2000/svg", w = 90, h = 18;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", "spark"); svg.setAttribute("width", w); svg.setAttribute("height", h);
  vals = (vals || []).filter((v) => typeof v === "number");  // a diverged point ("nan") is left out
  if (vals.length < 2) return svg;
  if (typeof lo !== "number" || typeof hi !== "number") { lo = Math.min(...vals); hi = Math.max(...vals); }
  svg.dataset.lo = String(lo); svg.dataset.hi = String(hi);
  const span = hi - lo || 1;
  const pts = vals.map((v, i) => `${(i / (vals.length - 1) * (w - 2) + 1).toFixed(1)},${(h - 1 - (v - lo) / span * (h - 2)).toFixed(1)}`);
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", pts.join(" ")); line.setAttribute("fill", "none");
  line.setAttribute("stroke", color || "#1f6feb"); line.setAttribute("stroke-width", "1.5");
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

// a powered-off host: its platform releases it (and wipes its disk) after a while (docs/power.md)
function diskLine(h, d) {
  if (d.error) return `${h}: ${d.error}`;
  const when = d.left_s > 0 ? `in ${d.left} (${new Date(d.released_at * 1000).toLocaleString()})` : "already (it may be gone)";
  const only = (d.only_there || []).map((j) => `${j.job_id}${j.checkpoint ? " " + j.checkpoint : ""}`);
  return `${h} is powered off: its platform releases it and wipes its disk ${when}` +
    (only.length ? `; only there: ${only.join(", ")} (gpujob host on ${h}, then gpujob pull JOB --latest)` : "");
}

function jobsView() {
  const selected = new Set();
  let rows = [], sortKey = "submitted_at", asc = false;
  const filter = el("input", { type: "search", id: "filter", placeholder: "filter: job, host, state, diagnosis…" });
  const stateSel = el("select", { id: "state-filter" }, ["all", "running", "queued", "finished", "failed"].map((s) => el("option", { value: s }, s)));
  const compareBtn = el("button", { id: "compare", onclick: () => {
    if (selected.size) location.href = "/compare?" + new URLSearchParams({ runs: [...selected].join(",") });
  } }, "Compare selected");
  const errors = el("div", { class: "errors", id: "host-errors" });
  const disks = el("div", { class: "errors", id: "host-disks" });
  const count = el("span", { class: "muted", id: "count" });
  const head = el("tr", {}, el("th", {}, ""), COLUMNS.map(([k, label]) => el("th", { "data-key": k, onclick: () => {
    if (sortKey === k) asc = !asc; else { sortKey = k; asc = true; }
    render();
  } }, label)));
  const body = el("tbody");
  main.replaceChildren(el("h1", {}, "Jobs"), el("div", { class: "toolbar" }, filter, stateSel, compareBtn, count), errors,
    disks, el("table", { id: "jobs" }, el("thead", {}, head), body));
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
    disks.replaceChildren(...Object.entries(doc.disks || {}).map(([h, d]) => el("div", { "data-host": h }, diskLine(h, d))));
    render();
  } });
}

// ---- charts: TensorBoard's scalars on uPlot -------------------------------------------------------
// One chart per metric, every run overlaid on it (one y scale across the runs), grouped by the
// metric's prefix (train/, eval/). Smoothing is TensorBoard's debiased EMA; the raw curve stays
// faint behind it. x: step, time since the run's first point, or wall time. Drag to zoom,
// double-click to reset; the legend under a chart shows every run's value under the cursor.
const PREFS_KEY = "gpujob.charts";
const INT_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 2.5e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7];  // steps and trials are whole
const X_MODES = { step: "step", relative: "relative time", wall: "wall time" };

function chartPrefs() {
  const d = { smoothing: 0.6, log: false, x: "step" };
  try { return { ...d, ...JSON.parse(localStorage.getItem(PREFS_KEY) || "{}") }; } catch (e) { return d; }
}

// TensorBoard's smoothing: an exponential moving average, debiased so that its first points are
// not pulled towards zero; a gap (a diverged point) stays a gap and does not break the average.
function smooth(ys, w) {
  if (!(w > 0)) return ys.slice();
  let last = 0, n = 0;
  return ys.map((y) => {
    if (typeof y !== "number" || !isFinite(y)) return y;
    last = last * w + (1 - w) * y;
    n += 1;
    return last / (1 - Math.pow(w, n));
  });
}

function num(v) { return typeof v === "number" && isFinite(v) ? v : null; }

function fmtAxis(v) { return v === null ? "" : Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(1) : String(Number(v.toPrecision(4))); }

function fmtX(mode, v) {
  if (typeof v !== "number") return "-";
  if (mode === "wall") return new Date(v * 1000).toLocaleString();
  if (mode === "relative") return dur(v);
  return String(Math.round(v * 1000) / 1000);
}

// the run's first wall time, over all its metrics: relative time counts from there
function runStart(series) {
  let t0 = Infinity;
  for (const pts of Object.values(series || {})) for (const p of pts) if (typeof p[2] === "number" && p[2] < t0) t0 = p[2];
  return t0;
}

// one run's curve of one metric as [xs, raw, smoothed]: sorted by x, one point per x (a resumed
// attempt's step replaces the earlier attempt's), gaps where the value is not a number
function curve(points, mode, t0, prefs) {
  const byX = new Map();
  for (const p of points || []) {
    const x = mode === "step" ? num(p[0]) : mode === "relative" ? (num(p[2]) === null ? null : p[2] - t0) : num(p[2]);
    if (x === null) continue;
    let y = num(p[1]);
    if (prefs.log && y !== null && y <= 0) y = null;  // no place on a log axis
    byX.set(x, y);
  }
  const xs = [...byX.keys()].sort((a, b) => a - b), raw = xs.map((x) => byX.get(x));
  return [xs, raw, smooth(raw, prefs.smoothing)];
}

function chartBoard(box) {
  const prefs = chartPrefs();
  const save = () => { try { localStorage.setItem(PREFS_KEY, JSON.stringify(prefs)); } catch (e) { /* private mode */ } };
  const slider = el("input", { type: "range", id: "smoothing", min: 0, max: 0.99, step: 0.01, value: prefs.smoothing });
  const shownW = el("span", { id: "smoothing-value", class: "num-label" }, prefs.smoothing.toFixed(2));
  const logBox = el("input", { type: "checkbox", id: "log-y", checked: prefs.log });
  const xSel = el("select", { id: "x-axis" }, Object.entries(X_MODES).map(([k, label]) => el("option", { value: k, selected: k === prefs.x }, label)));
  const legend = el("div", { class: "run-legend", id: "run-legend" });
  const groups = el("div", { id: "chart-groups" });
  const note = el("p", { class: "muted", id: "charts-note" });
  const controls = el("div", { class: "chart-controls", hidden: true },
    el("label", {}, "smoothing ", slider, shownW), el("label", {}, logBox, " log y"), el("label", {}, "x ", xSel),
    el("span", { class: "muted" }, "drag to zoom · double-click to reset"));
  box.replaceChildren(controls, legend, note, groups);
  let runs = [];
  const hidden = new Set(), plots = new Map();  // metric → {plot, holder, range, zoomed}

  slider.addEventListener("input", () => { prefs.smoothing = Number(slider.value); shownW.textContent = prefs.smoothing.toFixed(2); save(); draw(false); });
  logBox.addEventListener("change", () => { prefs.log = logBox.checked; save(); draw(true); });
  xSel.addEventListener("change", () => { prefs.x = xSel.value; save(); draw(true); });
  window.addEventListener("resize", () => fit());

  // each chart as wide as its place (which changes as groups fill up and the window is resized)
  function fit() {
    for (const c of plots.values()) {
      const w = Math.max(300, c.holder.clientWidth - 12);
      if (Math.abs(w - c.plot.width) > 1) c.plot.setSize({ width: w, height: 230 });
    }
  }

  function metrics() { return [...new Set(runs.flatMap((r) => Object.keys(r.series || {})))].sort(); }

  function groupOf(k) { const i = k.indexOf("/"); return i > 0 ? k.slice(0, i) : ""; }

  function groupBox(name) {
    let g = groups.querySelector(`section[data-group="${CSS.escape(name)}"]`);
    if (!g) {
      g = el("section", { class: "chart-group", "data-group": name }, el("h3", {}, name ? `${name}/` : "metrics"), el("div", { class: "charts" }));
      const after = [...groups.children].find((s) => s.dataset.group > name);
      groups.insertBefore(g, after || null);
    }
    return g.querySelector(".charts");
  }

  function tables(k) {
    return runs.map((r) => curve((r.series || {})[k], prefs.x, runStart(r.series), prefs));
  }

  function caption(c) {
    const [lo, hi] = c.range;
    c.holder.dataset.xMin = String(lo); c.holder.dataset.xMax = String(hi);
    c.caption.textContent = `${X_MODES[prefs.x]} ${fmtX(prefs.x, lo)} – ${fmtX(prefs.x, hi)}${c.zoomed ? "  (zoomed: double-click to reset)" : ""}`;
  }

  function make(k, data) {
    const single = runs.length === 1;
    const series = [{ label: X_MODES[prefs.x], value: (u, v) => fmtX(prefs.x, v) }];
    runs.forEach((r, i) => {
      series.push({ label: `${single ? k : r.label} raw`, stroke: r.color + "44", width: 1, spanGaps: true, points: { show: false },
        show: prefs.smoothing > 0 && !hidden.has(r.key) });
      series.push({ label: single ? k : r.label, stroke: r.color, width: 1.6, spanGaps: true, show: !hidden.has(r.key),
        value: (u, v, si, di) => {
          if (v === null || v === undefined) return "-";
          const raw = u.data[si - 1][di];
          return prefs.smoothing > 0 && typeof raw === "number" ? `${fmt(v)} (raw ${fmt(raw)})` : fmt(v);
        } });
    });
    const holder = el("div", { class: "chart", "data-metric": k });
    const cap = el("div", { class: "chart-range" });
    const grid = groupBox(groupOf(k));
    grid.appendChild(holder);
    const n = grid.children.length;  // a group takes the room of its charts: small groups share a row
    grid.parentNode.style.flex = `${n} 1 ${n * 472}px`;
    const c = { holder, caption: cap, zoomed: false, range: [null, null], full: [null, null] };
    const opts = {
      title: k, width: Math.max(300, holder.clientWidth - 12), height: 230,
      scales: { x: { time: prefs.x === "wall" }, y: prefs.log ? { distr: 3, log: 10 } : {} },
      cursor: { sync: { key: "gpujob-charts", setSeries: false }, drag: { x: true, y: false } },
      legend: { live: true },
      axes: [prefs.x === "relative" ? { values: (u, splits) => splits.map((v) => dur(v)) } : prefs.x === "step" ? { incrs: INT_INCRS } : {},
        { size: 64, values: (u, splits) => splits.map((v) => fmtAxis(v)) }],
      series,
      hooks: { setScale: [(u, key) => {
        if (key !== "x") return;
        c.range = [u.scales.x.min, u.scales.x.max];
        c.zoomed = c.full[0] !== null && (c.range[0] > c.full[0] + 1e-9 || c.range[1] < c.full[1] - 1e-9);
        caption(c);
      }] },
    };
    c.full = extent(data[0]);
    c.plot = new uPlot(opts, data, holder);
    holder.appendChild(cap);
    holder.uplot = c.plot;  // the tests read the tick labels the canvas shows
    // the raw curves' rows say nothing the smoothed rows do not (their value shows "raw")
    c.plot.root.querySelectorAll(".u-legend tr.u-series").forEach((tr, i) => { if (i > 0 && i % 2 === 1) tr.style.display = "none"; });
    plots.set(k, c);
    return c;
  }

  function extent(xs) { return xs.length ? [xs[0], xs[xs.length - 1]] : [null, null]; }

  function draw(rebuild) {
    if (rebuild) { for (const c of plots.values()) { c.plot.destroy(); c.holder.remove(); } plots.clear(); groups.replaceChildren(); }
    let timeless = 0;
    for (const k of metrics()) {
      const tabs = tables(k);
      const data = uPlot.join(tabs);
      const n = data[0].length;
      if (!n && prefs.x !== "step" && runs.some((r) => ((r.series || {})[k] || []).length)) timeless += 1;
      let c = plots.get(k);
      if (!c) c = make(k, data);
      else {
        c.full = extent(data[0]);
        c.plot.setData(data, !c.zoomed);  // a live update keeps the user's zoom
        if (!c.zoomed) caption(c);
      }
      const rows = c.plot.root.querySelectorAll(".u-legend tr.u-series");
      for (const [i, r] of runs.entries()) {
        c.plot.setSeries(1 + 2 * i, { show: prefs.smoothing > 0 && !hidden.has(r.key) });
        c.plot.setSeries(2 + 2 * i, { show: !hidden.has(r.key) });
        if (rows[2 + 2 * i]) rows[2 + 2 * i].style.display = hidden.has(r.key) ? "none" : "";  // the chip says it is off
      }
      const steps = runs.flatMap((r) => ((r.series || {})[k] || []).map((p) => p[0]).filter((x) => typeof x === "number"));
      Object.assign(c.holder.dataset, { points: String(n), lastStep: steps.length ? String(Math.max(...steps)) : "",
        xMode: prefs.x, yScale: prefs.log ? "log" : "linear", smoothing: String(prefs.smoothing) });
    }
    fit();
    controls.hidden = !plots.size;
    note.textContent = !plots.size ? "no metric reported yet (a metrics file, TensorBoard events or metrics in the log)" : timeless ? `${timeless} metric(s) have no wall time in their points (a metrics file written without "t"): x = step shows them` : "";
  }

  function drawLegend() {
    legend.replaceChildren(...(runs.length < 2 ? [] : runs.map((r) => el("button", {
      class: "run-chip" + (hidden.has(r.key) ? " off" : ""), "data-run": r.key, title: "show or hide this run in every chart",
      onclick: () => { if (hidden.has(r.key)) hidden.delete(r.key); else hidden.add(r.key); drawLegend(); draw(false); },
    }, el("span", { class: "swatch", style: `background:${r.color}` }), r.label))));
  }

  return {
    update(next) {
      const changed = next.length !== runs.length || next.some((r, i) => r.key !== (runs[i] || {}).key);
      runs = next;
      if (changed) drawLegend();
      draw(changed);
    },
  };
}

// ---- one job ----------------------------------------------------------------------------------
const CAN_STOP = ["queued", "running", "restarting"];
const CAN_RESUME = ["stopped", "failed", "lost", "autostopped"];  // the agent's resume: any ending but success

function metaCell(label, value, id) { return el("div", { id }, el("b", {}, label), value); }

function jobView(q) {
  const host = q.get("host") || "", id = q.get("id") || "";
  const meta = el("div", { class: "meta", id: "meta" });
  const diag = el("div", { id: "diagnosis" });
  const result = el("span", { id: "action-result" });
  const act = (name, path, question) => el("button", { id: `btn-${name}`, class: name === "stop" ? "danger" : null, hidden: true, onclick: async () => {
    if (!confirm(question)) return;
    result.textContent = `${name}…`;
    try {
      const doc = await post(path, host, id);
      result.textContent = `${name}: ${doc.state || doc.dest || doc.job_id || "done"}`;
    } catch (e) { result.textContent = `${name} failed: ${e.message}`; }
  } }, name === "pull" ? "Pull latest" : name[0].toUpperCase() + name.slice(1));
  const buttons = {
    stop: act("stop", "/api/job/stop", `Stop ${id} on ${host}? Its code may checkpoint first; resume continues from the newest checkpoint.`),
    resume: act("resume", "/api/job/resume", `Resume ${id} on ${host} from its newest complete checkpoint?`),
    pull: act("pull", "/api/job/pull", `Copy the newest complete checkpoint and the logs of ${id} here (pull --latest)?`),
  };
  const charts = el("div", { id: "charts" });
  const ckpts = el("tbody"), attempts = el("tbody"), mirror = el("div", { id: "mirror", class: "muted" });
  const log = el("pre", { id: "log" });
  const follow = el("input", { type: "checkbox", id: "log-follow", checked: true });
  main.replaceChildren(
    el("h1", {}, id, el("span", { class: "muted" }, ` on ${host}`)), meta, diag,
    el("div", { class: "actions" }, buttons.stop, buttons.resume, buttons.pull, result),
    el("h2", {}, "Curves"), charts,
    el("h2", {}, "Log ", el("label", { class: "muted follow" }, follow, " follow")), log,
    el("h2", {}, "Checkpoints"), mirror, el("table", { id: "checkpoints" }, el("thead", {}, el("tr", {}, ["name", "step", "complete", "mirror", "pulled here", "written"].map((h) => el("th", {}, h)))), ckpts),
    el("h2", {}, "Attempts"), el("table", { id: "attempts" }, el("thead", {}, el("tr", {}, ["#", "started", "ended", "exit", "resumed from", "diagnosis"].map((h) => el("th", {}, h)))), attempts));
  const board = chartBoard(charts);

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
    // a button only where it would act: stop a live job, resume one that ended short, pull a checkpoint there is
    buttons.stop.hidden = !CAN_STOP.includes(j.state);
    buttons.resume.hidden = !CAN_RESUME.includes(j.state);
    buttons.pull.hidden = !(j.checkpoints || []).some((c) => c.complete);
    // what `status` says of a failure: its cause (in full: the row has the agent's words for a job that never
    // started), where, the line, and the remedy; a failed or lost job without a diagnosis: its reason
    const d = j.diagnosis || (row.diagnosis ? { summary: row.diagnosis } : null);
    const cause = d && (d.cause === "not_started" && row.diagnosis ? row.diagnosis : d.summary || d.cause);
    diag.replaceChildren(...(d ? [el("div", { class: "diagnosis" }, [cause, d.where ? `\nat ${d.where}` : "",
      d.line && d.line !== cause ? `\n${d.line}` : "", d.remedy ? `\n→ ${d.remedy}` : ""].join(""))] : []));
    board.update([{ key: `${host}/${id}`, label: id, color: COLORS[0], series: j.series || {} }]);
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

  // the log follows like `tail -f`: while "follow" is ticked every new line (a new attempt's too)
  // scrolls into view; scrolling up unticks it, back to the bottom ticks it again
  log.addEventListener("scroll", () => { follow.checked = log.scrollTop + log.clientHeight >= log.scrollHeight - 4; });
  follow.addEventListener("change", () => { if (follow.checked) log.scrollTop = log.scrollHeight; });
  // the log's rows as a terminal shows them: a line event may replace the last rows (tqdm's nested bar moves
  // up and writes again); a note ends that, a new follow writes below it
  let rows = [];
  function say(text, cls) {
    log.appendChild(cls ? el("span", { class: cls }, text) : document.createTextNode(text));
    while (log.childNodes.length > 2000) log.removeChild(log.firstChild);
    if (follow.checked) log.scrollTop = log.scrollHeight;
    if (cls) rows = [];
  }
  function write(doc) {
    for (let k = Math.min(doc.rewrite || 0, rows.length); k > 0; k--) rows.pop().remove();
    for (const r of doc.rows || [doc.line]) { say(r + "\n"); rows.push(log.lastChild); }
    if (rows.length > 64) rows = rows.slice(-64);  // the server keeps as many (terminal.py MAX_ROWS)
  }

  // one stream: the job's status, and its log one line per event with the line's byte offset
  // as the event id (a reconnect resumes there)
  let seen = -1, ended = false;
  stream("/api/job/stream?" + new URLSearchParams({ host, id }), {
    job: showJob,
    line: (doc) => {
      if (doc.offset <= seen) return;
      seen = doc.offset;
      ended = false;
      write(doc);
    },
    end: () => { if (!ended) say("── end of log (the job ended) ──\n", "log-note"); ended = true; },
    failed: (doc) => say(`── ${doc.error}${doc.remedy ? " → " + doc.remedy : ""} ──\n`, "log-note"),
  });
}

// ---- compare -----------------------------------------------------------------------------------
function paramText(v) { return v === undefined ? "—" : v !== null && typeof v === "object" ? JSON.stringify(v) : String(v); }

function lastValue(points) {
  for (let i = (points || []).length - 1; i >= 0; i--) if (typeof points[i][1] === "number") return points[i][1];
  return null;
}

// each metric's last value per run, with a sparkline drawn on the metric's one scale across the runs
// (a flat curve looks flat beside a steep one)
function metricSummary(runs) {
  const metrics = [...new Set(runs.flatMap((r) => Object.keys(r.series || {})))].sort();
  return el("table", { id: "metric-summary" }, el("thead", {}, el("tr", {}, el("th", {}, "metric"), runs.map((r) => el("th", { style: `color:${r.color}` }, r.label)))),
    el("tbody", {}, metrics.map((k) => {
      const vals = runs.map((r) => ((r.series || {})[k] || []).map((p) => p[1]).filter((v) => typeof v === "number" && isFinite(v)));
      const all = vals.flat(), lo = Math.min(...all), hi = Math.max(...all);
      return el("tr", { "data-metric": k }, el("td", {}, k), runs.map((r, i) => el("td", { class: "num" },
        sparkline(vals[i], lo, hi, r.color), " ", fmt(lastValue((r.series || {})[k])))));
    })));
}

async function getJSON(url) {
  const r = await fetch(url);
  const doc = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) throw new Error(doc.error + (doc.remedy ? ` (${doc.remedy})` : ""));
  return doc;
}

async function compareView(q) {
  let runs = q.get("runs") || "", source = q.get("source") || "jobs";
  main.replaceChildren(el("h1", {}, "Compare"));
  const fail = (e) => main.appendChild(el("p", { class: "errors" }, e.message));
  if (!runs && q.get("sweep")) {  // a sweep's trials, from the ledger (its first twelve)
    try {
      const s = await getJSON("/api/sweep?" + new URLSearchParams({ name: q.get("sweep") }));
      runs = s.trials.map((t) => t.job_id).filter(Boolean).slice(0, 12).join(",");
      source = "ledger";
    } catch (e) { fail(e); return; }
  }
  if (!runs) { main.appendChild(el("p", { class: "muted" }, "Tick two or more jobs on the Jobs page (or runs on the Runs page, removed ones too), then Compare selected.")); return; }
  const loading = el("p", { class: "muted", id: "compare-loading" }, "loading…");
  main.appendChild(loading);
  let doc;
  try { doc = await getJSON("/api/compare?" + new URLSearchParams({ runs, source })); } catch (e) { loading.remove(); fail(e); return; }
  loading.remove();
  const oneHost = new Set(doc.runs.map((run) => run.host)).size === 1;  // then the job id names a run
  const colored = doc.runs.map((run, i) => ({ ...run, label: oneHost ? run.job_id || run.key : run.key, color: COLORS[i % COLORS.length] }));
  const allBox = el("input", { type: "checkbox", id: "params-all" });
  const params = el("table", { id: "params" });
  function drawParams() {
    const every = allBox.checked;
    const names = every ? [...new Set(colored.flatMap((r) => Object.keys(r.all_params || r.params)))].sort() : doc.differing;
    params.replaceChildren(el("thead", {}, el("tr", {}, el("th", {}, "parameter"), colored.map((r) => el("th", { style: `color:${r.color}` }, r.key)))),
      el("tbody", {}, names.map((k) => el("tr", { class: doc.differing.includes(k) ? "differs" : "same", "data-param": k }, el("td", {}, k),
        colored.map((r) => el("td", { class: "wrap" }, paramText((every ? r.all_params || r.params : r.params)[k])))))));
    if (!names.length) params.replaceChildren(el("tbody", {}, el("tr", {}, el("td", { class: "muted" }, "no parameter differs"))));
  }
  allBox.addEventListener("change", drawParams);
  drawParams();
  const charts = el("div", { id: "charts" });
  main.append(el("h2", {}, "Parameters ", el("label", { class: "muted" }, allBox, " show all (else only those that differ)")), params,
    el("h2", {}, "Metrics"), metricSummary(colored), el("h2", {}, "Curves"), charts);
  for (const run of doc.runs) if (run.error) main.insertBefore(el("p", { class: "errors" }, `${run.key}: ${run.error}`), charts);
  chartBoard(charts).update(colored);
  if (doc.sweep) {
    const box = el("section", { id: "sweep" }, el("h2", {}, `Sweep ${doc.sweep}`));
    main.appendChild(box);
    try { sweepView(box, await getJSON("/api/sweep?" + new URLSearchParams({ name: doc.sweep }))); } catch (e) { box.appendChild(el("p", { class: "errors" }, e.message)); }
  }
}

// ---- a sweep: Optuna's optimisation history, parallel coordinates, parameter importances ----------
function sweepView(box, s) {
  const metric = s.metric || "value";
  if (!s.history.length) { box.appendChild(el("p", { class: "muted" }, "no completed trial yet")); return; }
  const hist = el("div", { class: "chart", id: "sweep-history" });
  const coords = el("div", { class: "chart", id: "sweep-coords" });
  const imp = el("div", { class: "chart", id: "sweep-importances" });
  box.append(el("div", { class: "charts sweep-charts" }, hist, imp), coords);
  const xs = s.history.map((h) => h.number);
  new uPlot({
    title: `optimisation history (${metric}, ${s.direction})`, width: Math.max(300, hist.clientWidth - 12), height: 240,
    scales: { x: { time: false } }, axes: [{ label: "trial", incrs: INT_INCRS }, { size: 64, values: (u, v) => v.map(fmtAxis) }],
    series: [{ label: "trial" }, { label: metric, stroke: COLORS[0], width: 1, paths: () => null, points: { show: true, size: 8, width: 1, fill: COLORS[0] } },
      { label: "best so far", stroke: COLORS[1], width: 1.6, paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } }],
  }, [xs, s.history.map((h) => h.value), s.history.map((h) => h.best)], hist);
  imp.appendChild(el("div", { class: "u-title" }, "parameter importances (Optuna, PED-ANOVA)"));
  if (s.importances) {
    for (const [p, v] of Object.entries(s.importances)) imp.appendChild(el("div", { class: "imp-row", "data-param": p },
      el("span", { class: "imp-name" }, p), el("span", { class: "imp-bar" }, el("span", { style: `width:${(v * 100).toFixed(1)}%` })),
      el("span", { class: "imp-val" }, v.toFixed(3))));
  } else imp.appendChild(el("p", { class: "muted" }, s.why_no_importances || "-"));
  parallelCoords(coords, s, metric);
}

function parallelCoords(box, s, metric) {
  const NS = "http://www.w3.org/2000/svg";
  const names = Object.keys(s.axes), W = Math.max(600, box.clientWidth - 20), H = 300, top = 34, bottom = 30;
  const cols = [...names, metric], gap = (W - 120) / Math.max(1, cols.length - 1);
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("id", "coords-svg");
  const text = (x, y, t, anchor) => { const n = document.createElementNS(NS, "text"); n.setAttribute("x", x); n.setAttribute("y", y); n.setAttribute("text-anchor", anchor || "middle"); n.setAttribute("font-size", "11"); n.textContent = t; svg.appendChild(n); };
  const vals = s.trials.map((t) => t.value), vlo = Math.min(...vals), vhi = Math.max(...vals);
  // each axis maps a trial to 0..1 (bottom..top): a range linearly (log10 for a log one), a choice by its index
  const pos = (p, v) => {
    if (p === metric) return vhi > vlo ? (v - vlo) / (vhi - vlo) : 0.5;
    const a = s.axes[p];
    if (a.kind === "categorical") { const i = a.choices.findIndex((c) => JSON.stringify(c) === JSON.stringify(v)); return a.choices.length > 1 ? i / (a.choices.length - 1) : 0.5; }
    const f = a.kind === "log" ? Math.log10 : (x) => x;
    return a.high > a.low ? (f(v) - f(a.low)) / (f(a.high) - f(a.low)) : 0.5;
  };
  const yOf = (u) => top + (1 - u) * (H - top - bottom);
  const good = (v) => (vhi > vlo ? (s.direction === "maximize" ? (v - vlo) / (vhi - vlo) : (vhi - v) / (vhi - vlo)) : 1);
  for (const t of s.trials) {  // the better the trial, the darker and more blue its line
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("points", cols.map((p, i) => `${60 + i * gap},${yOf(pos(p, p === metric ? t.value : t.params[p])).toFixed(1)}`).join(" "));
    const g = good(t.value);
    line.setAttribute("stroke", `hsl(${Math.round(10 + 200 * g)}, 70%, ${Math.round(60 - 20 * g)}%)`);
    line.setAttribute("fill", "none"); line.setAttribute("stroke-width", "1.5"); line.setAttribute("data-trial", String(t.number));
    svg.appendChild(line);
  }
  cols.forEach((p, i) => {
    const x = 60 + i * gap, ax = document.createElementNS(NS, "line");
    ax.setAttribute("x1", x); ax.setAttribute("x2", x); ax.setAttribute("y1", top); ax.setAttribute("y2", H - bottom); ax.setAttribute("stroke", "#57606a");
    svg.appendChild(ax);
    text(x, 14, p);
    const a = s.axes[p];
    const label = (v) => (typeof v === "number" ? fmtAxis(v) : paramText(v));
    if (p !== metric && a.kind === "categorical") {  // every choice at its place on the axis
      a.choices.forEach((c, j) => text(x - 6, yOf(a.choices.length > 1 ? j / (a.choices.length - 1) : 0.5) + 4, label(c), "end"));
      return;
    }
    const ends = p === metric ? [vlo, vhi] : [a.low, a.high];
    text(x, H - bottom + 14, label(ends[0])); text(x, top - 6, label(ends[1]));
  });
  box.append(el("div", { class: "u-title" }, `parallel coordinates (${s.trials.length} completed trials)`), svg);
}

// ---- runs (the ledger: every run this laptop submitted, kept after rm/gc) ---------------------------
// The table fits the window: the columns a user picks (remembered in this browser), long values cut
// with the whole in their tooltip; the ledger's query, the filter and the sort live in the URL.
const RUN_COLS_KEY = "gpujob.runs.columns";
const RUN_COLS = [["job_id", "Run"], ["name", "Name"], ["state", "State"], ["loss", "Loss"], ["cost", "Cost"],
  ["host", "Host"], ["sweep", "Sweep"], ["gpu_hours", "GPU h"], ["submitted_at", "Submitted"]];
const RUN_COLS_SHOWN = ["job_id", "name", "state", "loss", "cost", "host", "submitted_at"];
const PARAMS_SHOWN = 8;  // the varying parameters shown until the user picks (the first, by name, if more vary)

function cell(v) { return v === null || v === undefined ? "-" : typeof v === "object" ? JSON.stringify(v) : fmt(v); }

function runsView(q) {
  const selected = new Set();
  let runs = [];
  let chosen = {};
  try { chosen = JSON.parse(localStorage.getItem(RUN_COLS_KEY) || "{}") || {}; } catch (e) { chosen = {}; }
  const order = q.get("order") || "";
  let sortKey = order.replace(/^-/, "") || null, asc = !order.startsWith("-");
  const name = el("input", { type: "search", id: "runs-name", placeholder: "name", value: q.get("name") || "" });
  const where = el("input", { type: "search", id: "runs-where", placeholder: "where: lr<1e-3, state=succeeded", value: q.get("where") || "" });
  const sort = el("input", { type: "search", id: "runs-sort", placeholder: "sort: eval_loss, -accuracy", value: q.get("sort") || "" });
  const filter = el("input", { type: "search", id: "runs-filter", placeholder: "filter shown rows…", value: q.get("filter") || "" });
  const compareBtn = el("button", { id: "compare-runs", onclick: () => {
    if (selected.size) location.href = "/compare?" + new URLSearchParams({ source: "ledger", runs: [...selected].join(",") });
  } }, "Compare selected");
  const count = el("span", { class: "muted", id: "runs-count" });
  const errors = el("div", { class: "errors", id: "runs-error" });
  const table = el("table", { id: "runs" });
  const panel = el("div", { id: "runs-column-panel", class: "column-panel", hidden: true });
  const chooser = el("button", { id: "runs-columns", onclick: () => { panel.hidden = !panel.hidden; } }, "Columns ▾");
  const ask = el("button", { id: "runs-apply", onclick: () => load() }, "Apply");
  document.addEventListener("click", (e) => { if (!panel.hidden && !chooser.parentNode.contains(e.target)) panel.hidden = true; });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") panel.hidden = true; });
  for (const i of [name, where, sort]) i.addEventListener("keydown", (e) => { if (e.key === "Enter") load(); });
  filter.addEventListener("input", () => { remember(); render(); });
  main.replaceChildren(el("h1", {}, "Runs"), el("div", { class: "toolbar" }, name, where, sort, ask, filter, compareBtn, el("span", { class: "chooser" }, chooser, panel), count), errors, table);

  // what the page shows is in its URL: a reload (or a shared link) shows the same rows in the same order
  function remember() {
    const args = new URLSearchParams();
    for (const [k, v] of [["name", name.value], ["where", where.value], ["sort", sort.value], ["filter", filter.value], ["order", sortKey ? (asc ? "" : "-") + sortKey : ""]])
      if (v.trim()) args.set(k, v.trim());
    history.replaceState(null, "", "/runs" + (args.toString() ? "?" + args : ""));
  }

  async function load() {
    const args = new URLSearchParams({ name: name.value.trim(), sort: sort.value.trim() });
    for (const w of where.value.split(",")) if (w.trim()) args.append("where", w.trim());
    remember();
    const r = await fetch("/api/runs?" + args);
    const doc = await r.json();
    if (!r.ok) { errors.textContent = doc.error + (doc.remedy ? ` (${doc.remedy})` : ""); return; }
    errors.textContent = "";
    runs = doc.runs.map((run) => ({ ...run, loss: (run.final || {})[run.loss_key || "loss"] }));
    count.textContent = `${runs.length} of ${doc.total}`;
    render();
  }

  function columns() {
    // a parameter varies when the runs that have it disagree on its value: one that only some runs have
    // (an HF Trainer's defaults beside plain scripts) does not by that alone; it can still be picked
    const names = [...new Set(runs.flatMap((run) => Object.keys(run.params || {})))].sort();
    const had = (k) => runs.filter((run) => k in (run.params || {})).map((run) => JSON.stringify(run.params[k]));
    const varying = names.filter((k) => new Set(had(k)).size > 1);
    const some = names.filter((k) => !varying.includes(k) && had(k).length < runs.length);
    const all = [...RUN_COLS.slice(0, 5), ...[...varying, ...some].map((k) => [`p:${k}`, k]), ...RUN_COLS.slice(5)];
    const byDefault = (k) => RUN_COLS_SHOWN.includes(k) || (k.startsWith("p:") && varying.slice(0, PARAMS_SHOWN).includes(k.slice(2)));
    return all.map(([k, label]) => [k, label, k in chosen ? chosen[k] : byDefault(k)]);
  }

  function drawPanel(cols) {
    panel.replaceChildren(...cols.map(([k, label, on]) => el("label", {}, el("input", { type: "checkbox", "data-col": k, checked: on, onchange: (e) => {
      chosen[k] = e.target.checked;
      try { localStorage.setItem(RUN_COLS_KEY, JSON.stringify(chosen)); } catch (err) { /* private mode */ }
      render();
    } }), ` ${label}`)));
  }

  function render() {
    const every = columns();
    drawPanel(every);
    const cols = every.filter(([, , on]) => on);
    const value = (run, k) => (k.startsWith("p:") ? (run.params || {})[k.slice(2)] : run[k]);
    const text = filter.value.trim().toLowerCase();
    const shown = runs.filter((run) => !text || JSON.stringify([run.job_id, run.name, run.host, run.state, run.sweep, run.params]).toLowerCase().includes(text));
    if (sortKey) shown.sort((a, b) => {
      const x = value(a, sortKey), y = value(b, sortKey);
      const c = x === y ? 0 : x === null || x === undefined ? 1 : y === null || y === undefined ? -1 : x < y ? -1 : 1;
      return asc ? c : -c;
    });
    const td = (run, k) => {
      const v = value(run, k);
      if (k === "submitted_at") return el("td", { class: "when", title: when(v) }, stamp(v));
      if (k === "cost") return el("td", { class: "num" }, money(run.cost, run.currency));
      if (k === "state") return el("td", { class: `state state-${run.state}` }, run.state);
      if (k === "sweep" && v) return el("td", { title: v }, el("a", { href: "/compare?" + new URLSearchParams({ sweep: v }) }, v));
      if (k.startsWith("p:") && typeof v !== "number") return el("td", { class: "tail", title: cell(v) }, el("bdi", {}, cell(v)));
      return el("td", { class: typeof v === "number" ? "num" : null, title: cell(v) }, cell(v));
    };
    table.replaceChildren(
      el("thead", {}, el("tr", {}, el("th", { class: "tick" }, ""), cols.map(([k, label]) => el("th", { "data-key": k, title: label, class: k === sortKey ? "sorted" + (asc ? " asc" : "") : null, onclick: () => {
        if (sortKey === k) asc = !asc; else { sortKey = k; asc = true; }
        remember();
        render();
      } }, label)))),
      el("tbody", {}, shown.map((run) => el("tr", { "data-key": run.job_id, "data-state": run.state },
        el("td", { class: "tick" }, el("input", { type: "checkbox", checked: selected.has(run.job_id), onchange: (e) => {
          if (e.target.checked) selected.add(run.job_id); else selected.delete(run.job_id);
        } })),
        cols.map(([k]) => td(run, k))))));
  }
  load();
}

const q = new URLSearchParams(location.search);
if (location.pathname === "/job") jobView(q);
else if (location.pathname === "/runs") runsView(q);
else if (location.pathname === "/compare") compareView(q);
else jobsView();
