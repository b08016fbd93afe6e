// The live sweep dashboard: polls /api/update for what changed since the last revision,
// merges the changed traces into its copy of each figure and redraws with Plotly.react.
// Every layout carries a uirevision and every trace a stable uid, so zoom, legend toggles
// and selections survive updates. Names from the sweep are only ever set as text
// (textContent / Plotly text, escaped by the server), never parsed as HTML.
"use strict";

(() => {
  const FIGURES = ["status", "loss_vs_lr", "scaling", "optimal_lr", "leads", "learning_curves", "progress"];
  const POLL_MS = 1000;
  const PLOT_CONFIG = {
    responsive: true,
    displaylogo: false,
    toImageButtonOptions: { format: "png", scale: 2 },
  };

  const state = {
    epoch: "",
    rev: 0,
    figs: {},
    filters: { method: null, size: null, seed: null }, // null: everything
    options: { methods: [], sizes: [], seeds: [] },
    polls: 0,
    renders: 0,
    firstRenderMs: null,
    lastPayloadBytes: 0,
    lastTimings: null, // milliseconds of the last poll: fetch (incl. server), parse, draw
    drawMs: {}, // milliseconds of each figure's last Plotly.react
    lastError: null,
  };
  window.sweepDashboard = state; // for the browser tests and for debugging in the console

  let timer = null;
  let inflight = false;
  let again = false;
  let generation = 0; // bumped when the filters change: answers for older filters are dropped
  // Axis ranges the user zoomed to, per figure. uirevision alone keeps a zoom only while
  // the server sends the same range; these also win over ranges the server recomputes.
  const userRanges = {};

  const $ = (id) => document.getElementById(id);

  function node(tag, props, text) {
    const el = document.createElement(tag);
    Object.assign(el, props || {});
    if (text !== undefined) el.textContent = String(text);
    return el;
  }

  // Filters -----------------------------------------------------------------------------------

  function query() {
    const params = new URLSearchParams();
    params.set("since", String(state.rev));
    if (state.epoch) params.set("epoch", state.epoch);
    for (const key of ["method", "size", "seed"]) {
      const chosen = state.filters[key];
      if (chosen === null) continue;
      if (chosen.size === 0) params.append(key, "");
      for (const value of [...chosen].sort()) params.append(key, String(value));
    }
    return params.toString();
  }

  function renderFilter(key, values, colourOf) {
    const box = $("filter-" + key);
    const known = new Set([...box.querySelectorAll("input")].map((i) => i.value));
    const wanted = values.map(String);
    if (wanted.length === known.size && wanted.every((v) => known.has(v))) return;
    for (const label of [...box.querySelectorAll("label")]) label.remove();
    for (const value of wanted) {
      const input = node("input", { type: "checkbox", value });
      input.checked = state.filters[key] === null || state.filters[key].has(value);
      input.addEventListener("change", () => onFilterChange(key));
      const label = node("label");
      label.append(input);
      const colour = colourOf ? colourOf(value) : null;
      if (colour) {
        const swatch = node("span", { className: "swatch" });
        swatch.style.background = colour;
        label.append(swatch);
      }
      label.append(node("span", {}, value));
      box.append(label);
    }
  }

  function onFilterChange(key) {
    const inputs = [...$("filter-" + key).querySelectorAll("input")];
    const checked = inputs.filter((i) => i.checked).map((i) => i.value);
    state.filters[key] = checked.length === inputs.length ? null : new Set(checked);
    restart();
  }

  function resetFilters() {
    for (const key of Object.keys(state.filters)) state.filters[key] = null;
    for (const input of document.querySelectorAll("#filters input")) input.checked = true;
    restart();
  }

  function restart() {
    generation += 1;
    state.rev = 0; // another filter is another view: ask for all of it
    state.figs = {};
    schedule(0);
  }

  // Header -------------------------------------------------------------------------------------

  function renderHeader(msg) {
    const name = msg.sweep && msg.sweep.name ? msg.sweep.name : "sweep";
    $("sweep-name").textContent = name;
    document.title = name + " · sweep dashboard";
    const s = msg.summary || {};
    const points = s.points || {};
    const cells = s.cells || {};
    const done = (points.ok || 0) + (points.diverged || 0) + (points.stalled || 0) + (points.failed || 0);
    const noLR = (cells.diverged || 0) + (cells.stalled || 0);
    const parts = [
      `${done}/${s.n_points || 0} points done`,
      `${points.running || 0} running`,
      `${points.diverged || 0} diverged`,
      `${points.stalled || 0} stalled`,
      `${points.failed || 0} failed`,
      `cells: ${cells.bracketed || 0} bracketed, ${cells.edge || 0} edge, ${cells.running || 0} running, ${cells.pending || 0} pending` +
        (noLR ? `, ${noLR} with no usable LR` : ""),
      s.fits ? "fits: yes" : "fits: not yet (sweeper fit DIR)",
    ];
    if (s.latest_event) parts.push("last event " + new Date(s.latest_event * 1000).toLocaleString());
    const box = $("summary");
    box.replaceChildren(...parts.map((p) => node("span", {}, p)));
    const colours = new Map((msg.options.methods || []).map((m) => [m.name, m.colour]));
    renderFilter("method", (msg.options.methods || []).map((m) => m.name), (v) => colours.get(v));
    renderFilter("size", msg.options.sizes || []);
    renderFilter("seed", msg.options.seeds || []);
    const err = $("error");
    if (msg.error) {
      err.textContent = "Reading the store failed: " + msg.error + " (showing the last good state)";
      err.hidden = false;
    } else {
      err.hidden = true;
    }
  }

  function setConnection(ok, text) {
    const el = $("connection");
    el.className = "connection " + (ok ? "live" : "lost");
    el.textContent = text;
  }

  // Figures ------------------------------------------------------------------------------------

  function merge(name, part) {
    const fig = state.figs[name] || (state.figs[name] = { layout: null, order: [], traces: {} });
    if (part.layout) fig.layout = part.layout;
    if (part.traces) Object.assign(fig.traces, part.traces);
    if (part.order) {
      fig.order = part.order;
      const keep = new Set(part.order);
      for (const uid of Object.keys(fig.traces)) if (!keep.has(uid)) delete fig.traces[uid];
    }
  }

  function watchZoom(div, name) {
    if (div.dataset.watched) return;
    div.dataset.watched = "1";
    div.on("plotly_relayout", (event) => {
      const ranges = userRanges[name] || (userRanges[name] = {});
      for (const [key, value] of Object.entries(event || {})) {
        const m = /^([xy]axis\d*)\.(range|autorange)(?:\[(\d)\])?$/.exec(key);
        if (!m) continue;
        const axis = m[1];
        if (m[2] === "autorange") {
          if (value) delete ranges[axis];
        } else if (m[3] === undefined) {
          ranges[axis] = value.slice();
        } else {
          const range = ranges[axis] || (div.layout[axis] && div.layout[axis].range ? div.layout[axis].range.slice() : [null, null]);
          range[Number(m[3])] = value;
          ranges[axis] = range;
        }
      }
    });
  }

  function draw(name) {
    const fig = state.figs[name];
    const div = $("fig-" + name);
    if (!fig || !fig.layout || !div) return Promise.resolve();
    const data = fig.order.map((uid) => fig.traces[uid]).filter(Boolean);
    const layout = structuredClone(fig.layout);
    delete layout.width; // the page decides the width; the server's height stays
    layout.autosize = true;
    for (const [axis, range] of Object.entries(userRanges[name] || {})) {
      layout[axis] = Object.assign({}, layout[axis], { range: range.slice(), autorange: false });
    }
    const t0 = performance.now();
    return Plotly.react(div, data, layout, PLOT_CONFIG).then(() => {
      state.drawMs[name] = performance.now() - t0;
      watchZoom(div, name);
      div.dataset.traces = String(data.length);
      div.dataset.points = String(data.reduce((n, t) => n + (Array.isArray(t.x) ? t.x.length : 0) + (Array.isArray(t.z) ? t.z.length : 0), 0));
      div.dataset.rev = String(state.rev);
      state.renders += 1;
    });
  }

  async function apply(msg) {
    if (msg.full) state.figs = {};
    state.epoch = msg.epoch;
    renderHeader(msg);
    const changed = Object.keys(msg.figures || {});
    for (const name of changed) merge(name, msg.figures[name]);
    state.rev = msg.rev;
    // one figure at a time, in page order, letting the browser paint in between: the top
    // of the page appears first, and each figure's draw time is its own
    for (const name of FIGURES.filter((n) => changed.includes(n))) {
      await draw(name);
      await new Promise((resolve) => requestAnimationFrame(() => resolve()));
    }
    if (state.firstRenderMs === null && FIGURES.every((n) => state.figs[n] && state.figs[n].layout)) {
      state.firstRenderMs = performance.now();
    }
  }

  async function poll() {
    timer = null;
    if (inflight) {
      again = true;
      return;
    }
    inflight = true;
    const asked = generation;
    try {
      const t0 = performance.now();
      const pending = early !== null && asked === 0 ? early : fetch("/api/update?" + query(), { cache: "no-store" });
      early = null;
      const response = await pending;
      const text = await response.text();
      if (!response.ok) throw new Error(`HTTP ${response.status}: ${text.slice(0, 200)}`);
      if (asked !== generation) return; // the filters changed meanwhile; `finally` asks again
      state.lastPayloadBytes = text.length;
      const t1 = performance.now();
      const msg = JSON.parse(text);
      const t2 = performance.now();
      await apply(msg);
      const t3 = performance.now();
      state.lastTimings = { fetch: t1 - t0, parse: t2 - t1, draw: t3 - t2, figures: Object.keys(msg.figures || {}).length };
      state.polls += 1;
      state.lastError = null;
      setConnection(true, "live · updated " + new Date().toLocaleTimeString());
    } catch (exc) {
      state.lastError = String(exc);
      setConnection(false, "cannot reach the dashboard server; retrying");
    } finally {
      inflight = false;
      schedule(again ? 0 : POLL_MS);
      again = false;
    }
  }

  function schedule(ms) {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(poll, ms);
  }

  function start() {
    if (typeof Plotly === "undefined") {
      setConnection(false, "plotly.js did not load");
      return;
    }
    $("filter-reset").addEventListener("click", resetFilters);
    schedule(0);
  }

  // The first answer is fetched while plotly.js (4.8 MB) is still being parsed: this script
  // runs before it (both are deferred, in order) and draws once the page is ready.
  let early = fetch("/api/update?since=0", { cache: "no-store" });
  // Deferred scripts run before DOMContentLoaded, which waits for plotly.js (deferred after us).
  if (document.readyState === "complete") start();
  else document.addEventListener("DOMContentLoaded", start);
})();
