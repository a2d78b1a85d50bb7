// Floodgate's live dashboard: polls GET /v1/dashboard once a second (asking only for the points
// it has not seen) and redraws the tables and charts. No library, nothing fetched from
// elsewhere; every value from the service is written as text, never as markup.
"use strict";
(() => {
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#3c3c3c"];
  const CLASSES = ["test", "get", "post", "critical"];
  const state = {
    since: null, points: [], token: null, authorized: false, max: 300, last: null,
    instance: null, generation: 0,
  };
  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svgEl(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  }

  function rate(x) {
    if (x === undefined || x === null) return "–";
    if (x >= 100) return x.toFixed(0);
    if (x >= 10) return x.toFixed(1);
    return x.toFixed(2);
  }

  function headers() {
    return state.token ? { Authorization: "Bearer " + state.token } : {};
  }

  // A line chart over the last five minutes: x is seconds before the latest point.
  function chart(svg, series, opts) {
    const W = 640, H = 190, L = 52, R = 12, T = 10, B = 26;
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.replaceChildren();
    const span = state.max;
    let top = opts.max !== undefined ? opts.max : 0;
    let bottom = opts.min !== undefined ? opts.min : 0;
    for (const s of series) for (const [, y] of s.points) { top = Math.max(top, y); bottom = Math.min(bottom, y); }
    if (opts.max === undefined) top = top > 0 ? top * 1.1 : 1;
    // Gridlines at round numbers: a step of 1, 2 or 5 times a power of ten, about four of them.
    const raw = (top - bottom) / 4 || 1;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
    if (opts.max === undefined) top = Math.ceil(top / step) * step;
    bottom = Math.floor(bottom / step) * step;
    const x = (age) => L + (W - L - R) * (1 - age / span);
    const y = (v) => T + (H - T - B) * (1 - (v - bottom) / (top - bottom || 1));
    const digits = Math.max(0, -Math.floor(Math.log10(step)));
    for (let v = bottom; v <= top + step / 2; v += step) {
      svg.append(svgEl("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }));
      const label = svgEl("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "tick" });
      label.textContent = v.toFixed(digits);
      svg.append(label);
    }
    for (let m = 0; m <= span / 60; m++) {
      const label = svgEl("text", { x: x(m * 60), y: H - 8, "text-anchor": "middle", class: "tick" });
      label.textContent = m === 0 ? "now" : `−${m} min`;
      svg.append(label);
    }
    const axis = svgEl("text", { x: 12, y: T + (H - T - B) / 2, class: "axis",
      transform: `rotate(-90 12 ${T + (H - T - B) / 2})`, "text-anchor": "middle" });
    axis.textContent = opts.unit;
    svg.append(axis);
    series.forEach((s, i) => {
      const color = s.color || COLORS[i % COLORS.length];
      if (s.points.length > 0) {
        const line = svgEl("polyline", {
          points: s.points.map(([age, v]) => `${x(age).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
          fill: "none", stroke: color, "stroke-width": s.width || 2,
          "stroke-dasharray": s.dashed ? "5 4" : "none", class: "series",
        });
        line.dataset.series = s.name;
        svg.append(line);
      }
    });
    const legend = svg.parentElement.querySelector(".legend");
    if (legend) {
      legend.replaceChildren(...series.map((s, i) => {
        const item = el("span", { class: "key" }, s.name);
        item.style.setProperty("--c", s.color || COLORS[i % COLORS.length]);
        return item;
      }));
    }
  }

  // The points of one stage's field, as [seconds before the latest point, value].
  function seriesOf(stage, pick) {
    const latest = state.points.length ? state.points[state.points.length - 1].t : 0;
    const out = [];
    for (const p of state.points) {
      const s = p.stages[stage];
      if (!s) continue;
      const v = pick(s);
      if (v !== undefined && v !== null) out.push([latest - p.t, v]);
    }
    return out;
  }

  // Removes the charts of stages a reload took away.
  function prune(parent, keep) {
    for (const f of parent.querySelectorAll("figure")) {
      if (!keep.has(f.dataset.chart)) f.remove();
    }
  }

  function figure(parent, id, title) {
    let fig = null;
    for (const f of parent.querySelectorAll("figure")) if (f.dataset.chart === id) fig = f;
    if (!fig) {
      fig = el("figure", { class: "chart" });
      fig.dataset.chart = id;
      fig.append(el("figcaption", {}, title), svgEl("svg", { role: "img" }), el("div", { class: "legend" }));
      parent.append(fig);
    }
    return fig.querySelector("svg");
  }

  function row(name) {
    for (const tr of document.querySelectorAll("#stage-table tbody tr")) {
      if (tr.dataset.stage === name) return tr;
    }
    const tr = el("tr");
    tr.dataset.stage = name;
    const cells = [["name", ""], ["kind", ""], ["mode", ""], ["num decisions", "–"],
      ["num refusals", "–"], ["num shadow", "–"], ["num fail-open", "–"], ["spark", ""]];
    for (const [cls, text] of cells) tr.append(el("td", { class: cls }, text));
    tr.querySelector(".name").replaceChildren(el("code", {}, name));
    $("stage-table").querySelector("tbody").append(tr);
    return tr;
  }

  function modeCell(td, stage) {
    if (!state.authorized) {
      td.replaceChildren(document.createTextNode(stage.mode));
    } else {
      let select = td.querySelector("select");
      if (!select) {
        select = el("select", { "aria-label": "mode of " + stage.name });
        for (const m of ["enforce", "shadow", "off"]) select.append(el("option", { value: m }, m));
        select.addEventListener("change", () => setMode(stage.name, select.value, select));
        td.replaceChildren(select);
      }
      select.dataset.mode = stage.mode;
      if (document.activeElement !== select) select.value = stage.mode;
    }
    // A mode switched at run time away from the configuration's is marked as such.
    let mark = td.querySelector(".switched");
    const switched = stage.configured_mode && stage.configured_mode !== stage.mode;
    if (switched && !mark) {
      mark = el("small", { class: "switched" });
      td.append(mark);
    }
    if (mark) {
      mark.hidden = !switched;
      mark.textContent = switched ? ` switched at run time (configured: ${stage.configured_mode})` : "";
    }
  }

  async function setMode(limiter, mode, select) {
    let message;
    try {
      const r = await fetch("/admin/mode", {
        method: "POST",
        headers: Object.assign({ "Content-Type": "application/json" }, headers()),
        body: JSON.stringify({ limiter, mode }),
      });
      const answer = await r.json().catch(() => ({}));
      message = r.ok ? `${limiter}: ${mode}` :
        (answer.error && answer.error.message) || `refused (${r.status})`;
      if (r.ok) select.dataset.mode = mode;
    } catch (e) {
      message = `not sent: ${e.message}`;
    }
    // A refused switch shows the mode in force again.
    select.value = select.dataset.mode;
    select.blur();
    $("admin-message").textContent = message;
  }

  // The Rate Limit Quota Service: shown once it has had a stream.
  function renderQuotas(q, latest) {
    const section = $("rlqs");
    const sent = q.sent.reduce((n, [, k]) => n + k, 0);
    section.hidden = q.streams === 0 && q.buckets === 0 && sent === 0;
    if (section.hidden) return;
    $("rlqs-streams").textContent = String(q.streams);
    $("rlqs-buckets").textContent = String(q.buckets);
    $("rlqs-shared").textContent = q.shared ?
      "divided among the streams of every node sharing the store" : "divided among this node's streams";
    $("rlqs-sent").textContent = q.sent.map(([k, n]) => `${k} ${n}`).join(", ");
    $("rlqs-failures").textContent = String(q.store_failures);
    const rows = $("rlqs-table").querySelector("tbody");
    rows.replaceChildren(...q.busiest.map((b) => {
      const tr = el("tr");
      const bar = el("td", { class: "meter" });
      const fill = el("span", { class: "share" });
      fill.style.width = `${b.limit > 0 ? Math.min(100, (100 * b.granted) / b.limit) : 0}%`;
      bar.append(fill);
      tr.append(el("td", {}, b.domain), el("td", {}, b.bucket),
        el("td", { class: "num" }, String(b.demand)), el("td", { class: "num" }, String(b.granted)),
        el("td", { class: "num" }, String(b.limit)), bar,
        el("td", { class: "num" }, String(b.claimants)));
      return tr;
    }));
    if (!latest) return;
    chart(figure($("rlqs-charts"), "rlqs", "streams, and assignments sent per second"), [
      { name: "streams", points: state.points.map((p) => [latest.t - p.t, p.rlqs_streams]) },
      { name: "assignments/s", points: state.points.map((p) => [latest.t - p.t, p.rlqs_assignments]),
        color: "#d55e00" },
    ], { unit: "" });
  }

  function render(d) {
    const latest = state.points[state.points.length - 1];
    const stages = d.stages;
    const present = new Set(stages.map((s) => s.name));
    for (const tr of document.querySelectorAll("#stage-table tbody tr")) {
      if (tr.dataset.stage !== undefined && !present.has(tr.dataset.stage)) tr.remove();
    }
    const none = $("no-stages");
    if (none) none.hidden = stages.length > 0;
    for (const stage of stages) {
      const tr = row(stage.name);
      const p = latest && latest.stages[stage.name];
      tr.querySelector(".kind").textContent = stage.kind;
      modeCell(tr.querySelector(".mode"), stage);
      tr.querySelector(".decisions").textContent = rate(p && p.decisions);
      tr.querySelector(".refusals").textContent = rate(p && p.refusals);
      tr.querySelector(".shadow").textContent = rate(p && p.shadow_refusals);
      tr.querySelector(".fail-open").textContent =
        `${rate(p && p.fail_open)} (${stage.totals.fail_open})`;
      tr.dataset.decisions = stage.totals.decisions;
      let spark = tr.querySelector(".spark svg");
      if (!spark) {
        spark = svgEl("svg", { viewBox: "0 0 160 24", class: "sparkline" });
        tr.querySelector(".spark").append(spark);
      }
      sparkline(spark, [seriesOf(stage.name, (s) => s.decisions), seriesOf(stage.name, (s) => s.refusals)]);
    }

    // Users put on a plan at run time (POST /admin/plan): who, with the admin token.
    const overrides = d.plan_overrides || { count: 0, users: null };
    $("plans").hidden = overrides.count === 0;
    const planRows = $("plan-table").querySelector("tbody");
    planRows.replaceChildren();
    for (const o of overrides.users || []) {
      const tr = el("tr", {});
      for (const text of [o.user, o.plan, o.configured || "none (default plan)"]) tr.append(el("td", {}, text));
      planRows.append(tr);
    }
    $("plan-note").textContent = overrides.users ? "" :
      `${overrides.count} user(s) on a plan set at run time: enter the admin token to see who.`;

    const fleet = $("fleet");
    const fleets = stages.filter((s) => s.kind === "fleet");
    fleet.hidden = fleets.length === 0;
    prune(fleet, new Set(fleets.map((s) => s.name)));
    for (const s of fleets) {
      const svg = figure(fleet, s.name, `${s.name}: in flight against capacity and reserve`);
      const span = [[state.max, 0], [0, 0]];
      chart(svg, [
        { name: "non-critical in flight", points: seriesOf(s.name, (p) => p.in_flight) },
        { name: `capacity (${s.capacity})`, points: span.map(([a]) => [a, s.capacity]), color: "#3c3c3c", dashed: true },
        { name: `non-critical allowance (${s.non_critical_allowance}; ${s.reserved_for_critical} reserved for critical)`,
          points: span.map(([a]) => [a, s.non_critical_allowance]), color: "#d55e00", dashed: true },
      ], { unit: "requests", max: Math.max(1, s.capacity) * 1.05 });
    }

    const util = $("utilization");
    const shedders = stages.filter((s) => s.kind === "utilization");
    util.hidden = shedders.length === 0;
    prune(util, new Set(shedders.flatMap((s) => [s.name + "/amount", s.name + "/drop"])));
    for (const s of shedders) {
      chart(figure(util, s.name + "/amount", `${s.name}: utilization and shed amount`), [
        { name: "utilization", points: seriesOf(s.name, (p) => p.utilization) },
        { name: "shed amount (below 0: at rest)", points: seriesOf(s.name, (p) => p.shed_amount) },
      ], { unit: "fraction", max: 1 });
      chart(figure(util, s.name + "/drop", `${s.name}: drop probability per class`),
        CLASSES.map((c, i) => ({
          name: c, points: seriesOf(s.name, (p) => p.drop_probability && p.drop_probability[i]),
        })), { unit: "probability", max: 1 });
    }

    const adaptive = $("adaptive");
    const learners = stages.filter((s) => s.kind === "adaptive_concurrency");
    adaptive.hidden = learners.length === 0;
    prune(adaptive, new Set(learners.flatMap((s) => [s.name + "/limit", s.name + "/rtt"])));
    for (const s of learners) {
      chart(figure(adaptive, s.name + "/limit", `${s.name} (${s.algorithm}): learned limit and requests in flight`), [
        { name: "limit", points: seriesOf(s.name, (p) => p.limit) },
        { name: "in flight", points: seriesOf(s.name, (p) => p.in_flight) },
      ], { unit: "requests" });
      chart(figure(adaptive, s.name + "/rtt", `${s.name}: latency, latest and baseline`), [
        { name: "latest", points: seriesOf(s.name, (p) => p.last_rtt_ms) },
        { name: s.algorithm === "vegas" ? "no-load (baseline)" : "long-term average (baseline)",
          points: seriesOf(s.name, (p) => p.baseline_rtt_ms) },
      ], { unit: "ms" });
    }

    renderQuotas(d.rlqs, latest);

    const keys = d.heavy_keys;
    const body = $("key-table").querySelector("tbody");
    body.replaceChildren(...keys.keys.map((k) => {
      const tr = el("tr");
      tr.append(el("td", {}, k.key), el("td", { class: "num" }, String(k.count)),
        el("td", { class: "num" }, k.error ? `≤ ${k.error}` : "0"));
      return tr;
    }));
    $("key-note").textContent = !keys.counted ? "Key counting is off (serve --heavy-keys 0)." :
      `${keys.requests} requests counted over the last ${keys.window_seconds / 60} minutes at most; ` +
      (keys.plain ? "keys shown in full (admin token)." :
        "keys shown as hashes: enter the admin token to see them.");

    const store = d.store;
    $("store-kind").textContent = `${store.kind} (${store.mode})`;
    const healthy = store.last_call_ok !== false && store.breaker !== "open";
    const badge = $("store-health");
    badge.textContent = store.breaker === "open" ? "breaker open" :
      store.last_call_ok === false ? "failing" : store.last_call_ok === null ? "no calls yet" : "healthy";
    badge.className = "badge " + (healthy ? "ok" : "bad");
    $("store-url").textContent = store.url;
    $("store-breaker").textContent = store.breaker === null ? "none (memory)" : store.breaker;
    $("store-errors").textContent = store.errors ?
      Object.entries(store.errors).map(([k, v]) => `${k} ${v}`).join(", ") : "–";
    chart(figure($("store-charts"), "store", "store calls and errors per second"), [
      { name: "calls/s", points: state.points.map((p) => [latest.t - p.t, p.store_calls]) },
      { name: "errors/s", points: state.points.map((p) => [latest.t - p.t, p.store_errors]), color: "#d55e00" },
    ], { unit: "per second" });

    $("admin").hidden = !d.admin;
  }

  function sparkline(svg, series) {
    svg.replaceChildren();
    let top = 1;
    for (const s of series) for (const [, v] of s) top = Math.max(top, v);
    series.forEach((s, i) => {
      if (!s.length) return;
      svg.append(svgEl("polyline", {
        points: s.map(([age, v]) => `${(160 * (1 - age / state.max)).toFixed(1)},${(23 - 22 * v / top).toFixed(1)}`).join(" "),
        fill: "none", stroke: COLORS[i], "stroke-width": 1.5,
      }));
    });
  }

  async function poll() {
    const generation = state.generation;
    try {
      const url = "/v1/dashboard" + (state.since === null ? "" : "?since=" + state.since);
      const r = await fetch(url, { headers: headers(), cache: "no-store" });
      if (r.status === 401) {
        // Off loopback, the data (the heaviest keys) needs the admin token: ask for it.
        const answer = await r.json().catch(() => ({}));
        $("admin").hidden = false;
        $("admin-message").textContent = (answer.error && answer.error.message) || "the admin token is needed";
        throw new Error("the admin token is needed");
      }
      if (!r.ok) throw new Error("HTTP " + r.status);
      let d = await r.json();
      // The token changed while this request was out: its answer is the old view.
      if (generation !== state.generation) return;
      const latest = d.points.length ? d.points[d.points.length - 1].seq : null;
      if (state.since !== null && (d.instance !== state.instance ||
          (latest !== null && latest < state.since))) {
        // Another process answers now (a restart): its points are numbered afresh.
        state.since = null;
        state.points = [];
        const again = await fetch("/v1/dashboard", { headers: headers(), cache: "no-store" });
        if (!again.ok) throw new Error("HTTP " + again.status);
        d = await again.json();
      }
      state.instance = d.instance;
      state.max = d.history_points * d.interval_seconds;
      state.authorized = d.authorized;
      for (const p of d.points) state.points.push(p);
      const keep = d.history_points;
      if (state.points.length > keep) state.points.splice(0, state.points.length - keep);
      if (d.points.length) state.since = d.points[d.points.length - 1].seq;
      render(d);
      state.last = new Date();
      $("status").textContent = `live · updated ${state.last.toLocaleTimeString()}`;
      $("status").className = "live";
    } catch (e) {
      $("status").textContent = `not updating: ${e.message}`;
      $("status").className = "stale";
    } finally {
      setTimeout(poll, 1000);
    }
  }

  $("admin").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = $("token");
    state.token = input.value || null;
    input.value = "";
    $("admin-message").textContent = state.token ? "token set for this page (kept in memory only)" : "";
    state.generation += 1;
    state.since = null;
    state.points = [];
  });

  poll();
})();
