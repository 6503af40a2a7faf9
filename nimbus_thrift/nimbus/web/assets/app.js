// nimbus-thrift's page: reads the daemon's Storm UI REST API (/api/v1) and its rate
// history (/api/nimbus-thrift/topology/:id/history), draws them, and sends the
// topology actions. Plain JS, no framework, no build step, nothing from another host.
//
// Every value from the server reaches the page as text (textContent, attributes, SVG
// numbers), never as HTML: an error message or a topology name cannot inject markup.
"use strict";

(function () {
  // A refresh every few seconds: the daemon samples figures about as often.
  const REFRESH_MS = 3000;
  // Rates of at most this many topologies are fetched per refresh for the table.
  const MAX_RATE_FETCHES = 20;
  // Errors shown for the selected topology (Storm keeps 10 per component).
  const MAX_ERRORS_SHOWN = 20;
  // Seconds of rates the page keeps of what it has seen itself: the chart's data until
  // the daemon's own history has two points (it samples every 10 s).
  const SEEN_SECS = 600;
  const CSRF_HEADER = "x-csrf-token";
  const ACTIONS = {
    activate: { verb: "Activate", wait: false, danger: false,
                text: "Its spouts resume reading; the Spark application starts again if it was stopped." },
    deactivate: { verb: "Deactivate", wait: false, danger: false,
                  text: "Its spouts stop reading new input; tuples in flight are finished." },
    rebalance: { verb: "Rebalance", wait: true, danger: false,
                 text: "The topology is deactivated for the wait time, then restarted from its checkpoint." },
    kill: { verb: "Kill", wait: true, danger: true,
            text: "The topology is deactivated for the wait time, then stopped and removed. This cannot be undone." },
  };

  const state = {
    selected: null,        // id of the topology shown below the table
    tokens: {},            // topology id -> antiForgeryToken (from GET /api/v1/topology/:id)
    spouts: {},            // topology id -> Set of spout ids (learnt from its page)
    detail: null,          // last GET /api/v1/topology/:id of the selected one
    timer: null,
    busy: false,
    pending: null,         // the action the dialog asks about
    configKey: "",         // the configuration last drawn (redrawn only when it changes)
    seen: {},              // topology id -> component -> [[secs, rate], ...] seen here
  };

  const $ = (id) => document.getElementById(id);

  // --- HTTP ------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(message, status) { super(message); this.status = status; }
  }

  async function api(path, options) {
    let response;
    try {
      response = await fetch(path, Object.assign({ credentials: "same-origin",
                                                   headers: { Accept: "application/json" } },
                                                 options || {}));
    } catch (err) {
      throw new ApiError(`the daemon did not answer (${err.message})`, 0);
    }
    const text = await response.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (err) { body = null; }
    if (!response.ok) {
      // Storm's error JSON: {"error": "...", "errorMessage": "..."}.
      const said = body && (body.errorMessage || body.error);
      throw new ApiError(said || `${response.status} ${response.statusText || "error"}`,
                         response.status);
    }
    return body;
  }

  const enc = encodeURIComponent;

  // --- formatting --------------------------------------------------------------------------
  const integer = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
  const decimal = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });

  function count(value) {
    return value === undefined || value === null || value === "" ? "–" : integer.format(Number(value));
  }
  function rate(value) {
    if (value === undefined || value === null || Number.isNaN(Number(value))) return "–";
    const v = Number(value);
    return v < 10 ? decimal.format(v) : integer.format(v);
  }
  function millis(value) {
    if (value === undefined || value === null || value === "") return "–";
    const v = Number(value);
    return v < 10 ? decimal.format(v) : integer.format(v);
  }
  function ago(secs) {
    if (secs === undefined || secs === null) return "";
    if (secs < 60) return `${secs}s ago`;
    if (secs < 3600) return `${Math.floor(secs / 60)}m ago`;
    if (secs < 86400) return `${Math.floor(secs / 3600)}h ago`;
    return `${Math.floor(secs / 86400)}d ago`;
  }
  function clock(date) {
    return date.toLocaleTimeString(undefined, { hour12: false });
  }

  // --- DOM helpers -------------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("data-") || key.startsWith("aria-") || key === "title" ||
               key === "id" || key === "href" || key === "scope" || key === "role") {
        node.setAttribute(key, String(value));
      } else node[key] = value;
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function badge(status) {
    const text = status || "UNKNOWN";
    return el("span", { class: `badge status-${text}`, text });
  }

  function showMessage(text) {
    const box = $("message");
    box.textContent = text || "";
    box.hidden = !text;
  }
  let noticeTimer = null;
  function showNotice(text) {
    const box = $("notice");
    box.textContent = text;
    box.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => { box.hidden = true; }, 8000);
  }

  // --- the rate chart ----------------------------------------------------------------------
  const SVG = "http://www.w3.org/2000/svg";

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
    return node;
  }

  // points: [[seconds, rate], ...] in time order. Drawn on a shared 0..max scale.
  function sparkline(points, label) {
    const width = 150, height = 32, pad = 3;
    if (!points || points.length < 2) {
      return el("span", { class: "chart-none", text: "collecting…" });
    }
    const t0 = points[0][0], t1 = points[points.length - 1][0];
    const span = t1 - t0 || 1;
    const max = Math.max(...points.map((p) => p[1]), 1e-9);
    const x = (t) => pad + ((t - t0) / span) * (width - 2 * pad);
    const y = (v) => height - pad - (v / max) * (height - 2 * pad);
    const line = points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    const chart = svg("svg", { class: "spark", width, height, viewBox: `0 0 ${width} ${height}`,
                               role: "img" });
    const now = points[points.length - 1][1];
    const minutes = Math.max(1, Math.round(span / 60));
    const text = `${label}: ${rate(now)}/s now, peak ${rate(max)}/s over the last ` +
                 `${minutes} minute${minutes === 1 ? "" : "s"}`;
    chart.setAttribute("aria-label", text);
    const title = svg("title", {});
    title.textContent = text;
    chart.append(title);
    chart.append(svg("line", { class: "base", x1: pad, x2: width - pad,
                               y1: height - pad + 0.5, y2: height - pad + 0.5 }));
    chart.append(svg("polygon", { class: "area", points:
      `${x(t0).toFixed(1)},${height - pad} ${line} ${x(t1).toFixed(1)},${height - pad}` }));
    chart.append(svg("polyline", { class: "line", points: line }));
    chart.append(svg("circle", { class: "dot", r: 2.2, cx: x(t1).toFixed(1), cy: y(now).toFixed(1) }));
    return chart;
  }

  // --- the history endpoint, read leniently ------------------------------------------------
  // The daemon answers {"sparkUi": url, "components": {cid: {"type", "rate"}},
  // "history": {cid: [[secs, rate], ...]}}; {"time", "rate"} points and a list of
  // {"component", "points"} are read too, so that the page and the server can evolve apart.
  function pointOf(p, index) {
    if (Array.isArray(p)) return [Number(p[0]), Number(p[1])];
    if (typeof p === "number") return [index, p];
    if (p && typeof p === "object") {
      const t = p.time ?? p.t ?? p.at ?? p.timeSecs ?? p.timestamp ?? index;
      const v = p.rate ?? p.value ?? p.v ?? 0;
      return [Number(t), Number(v)];
    }
    return null;
  }
  function seriesOf(raw) {
    if (Array.isArray(raw)) {
      return raw.map(pointOf).filter((p) => p && !Number.isNaN(p[0]) && !Number.isNaN(p[1]));
    }
    if (raw && typeof raw === "object") return seriesOf(raw.points || raw.series || []);
    return [];
  }
  function entriesOf(value) {
    if (Array.isArray(value)) return value.map((c) => [c.component ?? c.id ?? c.componentId, c]);
    return value && typeof value === "object" ? Object.entries(value) : [];
  }
  function readHistory(json) {
    const result = { sparkUi: "", detail: "", series: {}, kinds: {}, now: {} };
    if (!json || typeof json !== "object") return result;
    result.sparkUi = json.sparkUi || json.sparkUI || json.sparkUiUrl || "";
    result.detail = typeof json.detail === "string" ? json.detail : "";
    for (const [cid, raw] of entriesOf(json.components)) {
      if (cid === undefined || !raw || typeof raw !== "object") continue;
      const kind = raw.type || raw.kind || raw.componentType;
      if (kind) result.kinds[cid] = String(kind).toLowerCase();
      if (typeof raw.rate === "number") result.now[cid] = raw.rate;
      if (!Array.isArray(raw) && (raw.points || raw.series)) result.series[cid] = seriesOf(raw);
    }
    for (const [cid, raw] of entriesOf(json.history)) {
      if (cid !== undefined) result.series[cid] = seriesOf(raw);
    }
    return result;
  }
  // A component's rate now: the daemon's figure, else the chart's last point.
  function rateNow(history, cid) {
    if (cid in history.now) return history.now[cid];
    return lastRate(history.series[cid]);
  }
  // A topology's rate: the tuples per second its spouts emit (as `nimbus-thrift info`).
  function topologyRate(id, history) {
    const spouts = state.spouts[id];
    const cids = new Set([...Object.keys(history.now), ...Object.keys(history.series)]);
    let sum = null;
    for (const cid of cids) {
      if (history.kinds[cid] === "spout" || (spouts && spouts.has(cid))) {
        sum = (sum || 0) + (rateNow(history, cid) || 0);
      }
    }
    if (sum !== null) return sum;
    const all = [...cids].map((cid) => rateNow(history, cid)).filter((v) => v !== null);
    return all.length ? Math.max(...all) : null;
  }
  // Remember each component's rate now, for the chart while the daemon has no history.
  function observe(id, history) {
    const t = Date.now() / 1000;
    const seen = state.seen[id] || (state.seen[id] = {});
    for (const [cid, r] of Object.entries(history.now)) {
      const series = seen[cid] || (seen[cid] = []);
      series.push([t, r]);
      while (series.length && series[0][0] < t - SEEN_SECS) series.shift();
    }
  }
  function chartSeries(id, history, cid) {
    const server = history.series[cid] || [];
    return server.length >= 2 ? server : ((state.seen[id] || {})[cid] || []);
  }
  function lastRate(series) {
    return series && series.length ? series[series.length - 1][1] : null;
  }

  // --- drawing -----------------------------------------------------------------------------
  function drawCluster(cluster, nimbus, supervisors, conf) {
    const leader = (nimbus && nimbus.nimbuses && nimbus.nimbuses[0]) || {};
    $("cluster-nimbus").textContent = leader.host ? `${leader.host}:${leader.port}` : "–";
    $("cluster-nimbus-sub").textContent =
      [leader.version && `version ${leader.version}`, cluster.nimbusUptime && `up ${cluster.nimbusUptime}`]
        .filter(Boolean).join(" · ");
    const master = conf["nimbus-thrift.spark_master"] || conf["nimbus-thrift.spark.master"] || "";
    const local = !master || master.startsWith("local");
    $("cluster-spark").textContent = local ? "local" : master.replace(/^spark:\/\//, "");
    $("cluster-spark").title = master;
    $("cluster-spark-sub").textContent = local ? `${master || "local[*]"} · this machine`
      : (conf["nimbus-thrift.spark_master_ui"] ? `master UI ${conf["nimbus-thrift.spark_master_ui"]}`
                                                 : "standalone master");
    const sups = (supervisors && supervisors.supervisors) || [];
    $("cluster-workers").textContent = `${count(cluster.slotsUsed)} / ${count(cluster.slotsTotal)}`;
    $("cluster-workers-sub").textContent =
      `slots used on ${sups.length} worker host${sups.length === 1 ? "" : "s"}`;
    $("cluster-topologies").textContent = count(cluster.topologies);
    $("cluster-topologies-sub").textContent =
      `${count(cluster.executorsTotal)} executors · ${count(cluster.tasksTotal)} tasks`;
  }

  function drawTopologies(topologies, rates) {
    const body = $("topologies").tBodies[0];
    const rows = topologies.map((t) => {
      const link = el("a", { href: `#topology=${enc(t.id)}`, text: t.name });
      const row = el("tr", { "data-topology-id": t.id, class: t.id === state.selected ? "selected" : "" },
        el("td", { class: "name" }, link),
        el("td", { class: "id hide-narrow", text: t.id }),
        el("td", { class: "owner hide-narrow", text: t.owner || "" }),
        el("td", { class: "status" }, badge(t.status)),
        el("td", { class: "num uptime hide-phone", text: t.uptime || "" }),
        el("td", { class: "num workers hide-narrow", text: count(t.workersTotal) }),
        el("td", { class: "num executors hide-narrow", text: count(t.executorsTotal) }),
        el("td", { class: "num tasks hide-narrow", text: count(t.tasksTotal) }),
        el("td", { class: "num rate", text: rate(rates[t.id]) }));
      if (t.schedulerInfo) row.title = t.schedulerInfo;
      row.addEventListener("click", (event) => {
        if (event.target.closest("a")) return;       // the link changes the hash itself
        location.hash = `topology=${enc(t.id)}`;
      });
      return row;
    });
    body.replaceChildren(...rows);
    $("topologies-empty").hidden = topologies.length > 0;
  }

  function drawTopology(page, history, errors) {
    $("topology").hidden = false;
    $("topology-name").textContent = page.name;
    const status = page.status || "UNKNOWN";
    $("topology-status").className = `badge status-${status}`;
    $("topology-status").textContent = status;
    $("topology-id").textContent = page.id;
    $("topology-uptime").textContent = page.uptime ? `up ${page.uptime}` : "";
    // The driver's log, the last 50 KB (GET .../log: the topology's readers only).
    $("topology-log").href =
      `/api/nimbus-thrift/topology/${encodeURIComponent(page.id)}/log`;
    const ui = $("topology-spark-ui");
    if (history.sparkUi) {
      ui.href = history.sparkUi;
      ui.hidden = false;
    } else {
      ui.hidden = true;
      ui.removeAttribute("href");
    }
    // The launcher's sentence (batch, rate, warm start, relaunches); Storm's
    // schedulerInfo is only a word or two.
    $("topology-scheduler").textContent = history.detail || page.schedulerInfo || "";
    $("action-activate").disabled = status !== "INACTIVE";
    $("action-deactivate").disabled = status !== "ACTIVE";
    $("action-rebalance").disabled = !(status === "ACTIVE" || status === "INACTIVE");
    $("action-kill").disabled = status === "KILLED";

    const components = [
      ...(page.spouts || []).map((s) => ({ id: s.spoutId, type: "spout", row: s })),
      ...(page.bolts || []).map((b) => ({ id: b.boltId, type: "bolt", row: b })),
    ];
    const rows = components.map(({ id, type, row }) => {
      const series = chartSeries(page.id, history, id);
      const now = rateNow(history, id);
      const latency = type === "spout" ? row.completeLatency : (row.processLatency ?? row.executeLatency);
      return el("tr", { "data-component": id },
        el("td", { class: "component", text: id }),
        el("td", { class: "type hide-narrow", text: type }),
        el("td", { class: "num executors hide-narrow", text: count(row.executors) }),
        el("td", { class: "num emitted hide-narrow", text: count(row.emitted) }),
        el("td", { class: "num processed hide-narrow", text: type === "spout" ? "–" : count(row.executed) }),
        el("td", { class: "num rate", text: rate(now) }),
        el("td", { class: "chart-cell" }, sparkline(series, `${id} rate`)),
        el("td", { class: "num latency hide-narrow", text: millis(latency) }),
        el("td", { class: "error-cell hide-narrow", text: row.lastError || "", title: row.lastError || null }));
    });
    $("components").tBodies[0].replaceChildren(...rows);

    const items = errors.slice(0, MAX_ERRORS_SHOWN).map((e) => el("div", { class: "error-item" },
      el("div", { class: "error-head" },
        el("strong", { text: e.component }),
        el("span", { text: e.errorTime ? new Date(e.errorTime * 1000).toLocaleString() : "" }),
        el("span", { text: ago(e.errorLapsedSecs) }),
        e.errorHost ? el("span", { text: `${e.errorHost}${e.errorPort ? ":" + e.errorPort : ""}` }) : null),
      el("pre", { text: e.error })));
    $("errors").replaceChildren(...items);
    $("errors-empty").hidden = items.length > 0;

    const conf = page.configuration || {};
    const key = JSON.stringify(conf);
    if (key !== state.configKey) {
      state.configKey = key;
      const confRows = Object.keys(conf).sort().map((k) => el("tr", {},
        el("td", { text: k }),
        el("td", { text: typeof conf[k] === "string" ? conf[k] : JSON.stringify(conf[k]) })));
      $("configuration").tBodies[0].replaceChildren(...confRows);
    }
  }

  function hideTopology() {
    $("topology").hidden = true;
    state.detail = null;
    state.configKey = "";
  }

  // --- loading -----------------------------------------------------------------------------
  async function loadHistory(id) {
    try {
      return readHistory(await api(`/api/nimbus-thrift/topology/${enc(id)}/history`));
    } catch (err) {
      return readHistory(null);                       // no chart rather than no page
    }
  }

  async function loadErrors(id, page) {
    // Only components with a last error have any: one request each.
    const failing = [...(page.spouts || []).filter((s) => s.lastError).map((s) => s.spoutId),
                     ...(page.bolts || []).filter((b) => b.lastError).map((b) => b.boltId)];
    const found = [];
    await Promise.all(failing.map(async (cid) => {
      const comp = await api(`/api/v1/topology/${enc(id)}/component/${enc(cid)}`);
      for (const e of comp.componentErrors || []) found.push(Object.assign({ component: cid }, e));
    }));
    found.sort((a, b) => (b.errorTime || 0) - (a.errorTime || 0));
    return found;
  }

  async function refresh() {
    if (state.busy) return;
    state.busy = true;
    clearTimeout(state.timer);
    try {
      const [cluster, nimbus, supervisors, summary, conf] = await Promise.all([
        api("/api/v1/cluster/summary"), api("/api/v1/nimbus/summary"),
        api("/api/v1/supervisor/summary"), api("/api/v1/topology/summary"),
        api("/api/v1/cluster/configuration").catch(() => ({})),
      ]);
      drawCluster(cluster, nimbus, supervisors, conf || {});
      const topologies = summary.topologies || [];
      if (state.selected && !topologies.some((t) => t.id === state.selected)) {
        showNotice(`Topology ${state.selected} is gone.`);
        state.selected = null;
        hideTopology();
        history.replaceState(null, "", location.pathname + location.search);
      }
      const histories = {};
      await Promise.all(topologies.slice(0, MAX_RATE_FETCHES).map(async (t) => {
        histories[t.id] = await loadHistory(t.id);
        observe(t.id, histories[t.id]);
      }));
      if (state.selected) {
        const id = state.selected;
        const page = await api(`/api/v1/topology/${enc(id)}`);
        if (state.selected === id) {
          state.detail = page;
          state.tokens[id] = page.antiForgeryToken;
          state.spouts[id] = new Set((page.spouts || []).map((s) => s.spoutId));
          const errors = await loadErrors(id, page);
          drawTopology(page, histories[id] || await loadHistory(id), errors);
        }
      }
      const rates = {};
      for (const [id, h] of Object.entries(histories)) rates[id] = topologyRate(id, h);
      for (const id of Object.keys(state.seen)) {
        if (!topologies.some((t) => t.id === id)) delete state.seen[id];
      }
      drawTopologies(topologies, rates);
      showMessage("");
      $("updated").textContent = `updated ${clock(new Date())}`;
      $("updated").classList.remove("stale");
    } catch (err) {
      showMessage(err.message);
      $("updated").textContent = `not updated since ${clock(new Date())}`;
      $("updated").classList.add("stale");
    } finally {
      state.busy = false;
      schedule();
    }
  }

  function schedule() {
    clearTimeout(state.timer);
    if ($("auto-refresh").checked && !document.hidden) state.timer = setTimeout(refresh, REFRESH_MS);
  }

  function selectFromHash() {
    const match = /^#topology=(.+)$/.exec(location.hash);
    const id = match ? decodeURIComponent(match[1]) : null;
    if (id !== state.selected) {
      state.selected = id;
      state.configKey = "";
      if (!id) hideTopology();
    }
    for (const row of $("topologies").tBodies[0].rows) {
      row.classList.toggle("selected", row.dataset.topologyId === id);
    }
  }

  // --- actions -----------------------------------------------------------------------------
  function askAction(action) {
    const page = state.detail;
    if (!page) return;
    const what = ACTIONS[action];
    state.pending = { action, id: page.id, name: page.name };
    $("confirm-title").textContent = `${what.verb} ${page.name}?`;
    $("confirm-text").textContent = what.text;
    $("confirm-wait-row").hidden = !what.wait;
    $("confirm-wait").value = "30";
    const ok = $("confirm-ok");
    ok.textContent = what.verb;
    ok.className = what.danger ? "primary danger" : "primary";
    $("confirm-dialog").showModal();
    (what.wait ? $("confirm-wait") : ok).focus();
  }

  async function runAction(pending, wait) {
    const { action, id, name } = pending;
    const path = `/api/v1/topology/${enc(id)}/${action}` + (ACTIONS[action].wait ? `/${wait}` : "");
    const headers = { Accept: "application/json" };
    headers[CSRF_HEADER] = state.tokens[id] || "";
    const failed = $("action-error");
    failed.hidden = true;
    try {
      await api(path, { method: "POST", headers });
      const verb = { activate: "Activated", deactivate: "Deactivated", rebalance: "Rebalancing",
                     kill: "Killing" }[action];
      showNotice(`${verb} ${name}` + (ACTIONS[action].wait ? ` (wait ${wait} s).` : "."));
    } catch (err) {
      // Kept until the next action (a refresh clears only its own errors).
      failed.textContent = `${ACTIONS[action].verb} ${name}: ${err.message}`;
      failed.hidden = false;
    }
    await refreshSoon();
  }

  async function refreshSoon() {
    // The action's effect is in the next answer; wait for a refresh under way to end.
    while (state.busy) await new Promise((resolve) => setTimeout(resolve, 50));
    await refresh();
  }

  function setup() {
    for (const button of document.querySelectorAll(".actions button[data-action]")) {
      button.addEventListener("click", () => askAction(button.dataset.action));
    }
    $("confirm-cancel").addEventListener("click", () => {
      state.pending = null;
      $("confirm-dialog").close("cancel");
    });
    $("confirm-dialog").addEventListener("close", () => { state.pending = null; });
    $("confirm-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const pending = state.pending;
      if (!pending) return;
      let wait = 0;
      if (ACTIONS[pending.action].wait) {
        const input = $("confirm-wait");
        wait = Number(input.value);
        if (!Number.isInteger(wait) || wait < 0 || wait > 86400) {
          input.setCustomValidity("a whole number of seconds from 0 to 86400");
          input.reportValidity();
          return;
        }
        input.setCustomValidity("");
      }
      $("confirm-dialog").close("ok");
      runAction(pending, wait);
    });
    $("confirm-wait").addEventListener("input", () => $("confirm-wait").setCustomValidity(""));
    $("auto-refresh").addEventListener("change", () => ($("auto-refresh").checked ? refresh() : schedule()));
    document.addEventListener("visibilitychange", () => (document.hidden ? schedule() : refresh()));
    window.addEventListener("hashchange", () => { selectFromHash(); refreshSoon(); });
    $("home-link").addEventListener("click", (event) => {
      event.preventDefault();
      history.replaceState(null, "", location.pathname + location.search);
      selectFromHash();
    });
    selectFromHash();
    refresh();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setup);
  else setup();
})();
