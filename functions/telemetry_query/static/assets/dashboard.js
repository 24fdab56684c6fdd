// Engram telemetry dashboard: draws the telemetry API's answers; holds no data of its own.
// The token comes from the URL fragment (#token=..., never sent to a server) or the form,
// and is kept in sessionStorage for this tab only.
"use strict";

(function () {
  const API = "/api/ai/telemetry";
  const TOKEN_KEY = "engram.telemetry.token";
  const PERIOD_KEY = "engram.telemetry.period";
  const GRANULARITY = { "1h": "hour", "24h": "hour", "7d": "hour", "30d": "day" };
  const int = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
  const usd = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 4 });
  const pct = new Intl.NumberFormat("en-US", { style: "percent", maximumFractionDigits: 1 });

  const state = { period: sessionStorage.getItem(PERIOD_KEY) || "24h", metric: "turns", chart: null, timer: null };
  const $ = (selector) => document.querySelector(selector);

  function token() {
    const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (match) {
      sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
    return sessionStorage.getItem(TOKEN_KEY);
  }

  async function get(path, params) {
    const url = new URL(API + path, location.origin);
    Object.entries(params).forEach(([k, v]) => url.searchParams.set(k, v));
    const response = await fetch(url, { headers: { Authorization: "Bearer " + token(), Accept: "application/json" } });
    const body = await response.json();
    if (!response.ok) {
      const error = new Error(body.detail || response.statusText);
      error.status = response.status;
      throw error;
    }
    return body;
  }

  function setKpi(name, value, text) {
    const tile = document.querySelector(`[data-kpi="${name}"] .value`);
    tile.dataset.value = value === null ? "" : String(value);
    tile.textContent = text;
  }

  function renderOverview(o) {
    setKpi("turns", o.turns, int.format(o.turns));
    setKpi("cost_usd", o.cost_usd, "$" + usd.format(o.cost_usd));
    setKpi("tokens", o.tokens.total, int.format(o.tokens.total));
    setKpi("errors", o.errors, int.format(o.errors));
    setKpi("cache_hit_rate", o.cache_hit_rate, o.cache_hit_rate === null ? "–" : pct.format(o.cache_hit_rate));
    setKpi("ptl_count", o.ptl_count, int.format(o.ptl_count));
    $("#as-of").textContent = o.end.replace("T", " ").slice(0, 19);
  }

  function label(iso, granularity) {
    const d = new Date(iso);
    const day = d.toISOString().slice(5, 10);
    return granularity === "day" ? day : `${day} ${d.toISOString().slice(11, 16)}`;
  }

  function renderSeries(series) {
    const labels = series.points.map((p) => label(p.t, series.granularity));
    const values = series.points.map((p) => p.value);
    const title = $("#metric").selectedOptions[0].textContent;
    if (state.chart) {
      state.chart.data.labels = labels;
      state.chart.data.datasets[0].data = values;
      state.chart.data.datasets[0].label = title;
      state.chart.update("none");
      return;
    }
    state.chart = new Chart($("#timeseries"), {
      type: "line",
      data: {
        labels,
        datasets: [{ label: title, data: values, borderColor: "#2f6fde", backgroundColor: "rgba(47,111,222,0.15)",
                     fill: true, tension: 0, pointRadius: 2, spanGaps: true }],
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        responsive: true,
        interaction: { mode: "index", intersect: false },
        scales: { x: { ticks: { maxTicksLimit: 12 } }, y: { beginAtZero: true } },
        plugins: { legend: { display: false } },
      },
    });
  }

  function renderTable(selector, rows, cells) {
    const body = $(selector + " tbody");
    body.replaceChildren();
    if (!rows.length) {
      const tr = body.insertRow();
      const td = tr.insertCell();
      td.colSpan = 4;
      td.className = "empty";
      td.textContent = "no data in this period";
      return;
    }
    for (const row of rows) {
      const tr = body.insertRow();
      cells(row).forEach(([text, numeric], i) => {
        const td = tr.insertCell();
        td.textContent = text;
        if (i > 0) td.className = "num";
        if (numeric !== undefined) td.dataset.value = String(numeric);
      });
    }
  }

  function showError(message) {
    const box = $("#error");
    box.textContent = message;
    box.hidden = !message;
  }

  async function load() {
    if (!token()) {
      $("#login").hidden = false;
      $("#content").hidden = true;
      document.body.dataset.state = "login";
      return;
    }
    $("#login").hidden = true;
    $("#content").hidden = false;
    document.body.dataset.state = "loading";
    document.querySelectorAll("#period button").forEach((b) => {
      b.setAttribute("aria-pressed", String(b.dataset.period === state.period));
    });
    const period = state.period;
    try {
      const [overview, series, tools, users] = await Promise.all([
        get("/overview", { period }),
        get("/timeseries", { period, metric: state.metric, granularity: GRANULARITY[period] }),
        get("/top-tools", { period, limit: 10 }),
        get("/top-users", { period, limit: 10 }),
      ]);
      renderOverview(overview);
      renderSeries(series);
      renderTable("#top-tools", tools.items, (t) => [
        [t.tool_name], [int.format(t.calls), t.calls], [int.format(t.avg_duration_ms), t.avg_duration_ms],
        [pct.format(t.success_rate), t.success_rate],
      ]);
      renderTable("#top-users", users.items, (u) => [
        [u.user_id], ["$" + usd.format(u.cost_usd), u.cost_usd], [int.format(u.turns), u.turns],
        [int.format(u.tokens), u.tokens],
      ]);
      showError("");
      document.body.dataset.state = "ready";
    } catch (error) {
      if (error.status === 401) sessionStorage.removeItem(TOKEN_KEY);
      showError(`Could not load telemetry: ${error.message}`);
      document.body.dataset.state = "error";
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("#period").addEventListener("click", (e) => {
      const period = e.target.dataset && e.target.dataset.period;
      if (!period) return;
      state.period = period;
      sessionStorage.setItem(PERIOD_KEY, period);
      load();
    });
    $("#metric").addEventListener("change", (e) => { state.metric = e.target.value; load(); });
    $("#refresh").addEventListener("click", load);
    $("#login").addEventListener("submit", (e) => {
      e.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim());
      load();
    });
    load();
    state.timer = setInterval(() => { if (!document.hidden && token()) load(); }, 60000);
  });
})();
