// Tollgate dashboard: fetches /dashboard/api/* (the login cookie authenticates) and draws
// with the vendored Chart.js. All text goes through textContent (never innerHTML).
"use strict";

const PALETTE = ["#b91c1c", "#1d4ed8", "#15803d", "#a16207", "#7c3aed", "#0e7490",
                 "#be185d", "#4b5563"];
const charts = {};
const state = { window: "24h", tenant: "", offset: 0 };
const PAGE = 50;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c ?? ""));
  return e;
}

// One rounding for every amount (cards, tiles, bars, tables): cents from $1 up, two
// significant digits below (so $0.000028 never reads as $0.0000 elsewhere).
function usd(x) {
  if (x == null) return "–";
  const a = Math.abs(Number(x));
  const digits = a >= 1 || a === 0 ? 2 : Math.min(10, 1 - Math.floor(Math.log10(a)));
  return (x < 0 ? "-$" : "$") + a.toFixed(digits);
}
function pct(x) { return x == null ? "–" : (100 * x).toFixed(1) + "%"; }
function ms(x) { return x == null ? "–" : Math.round(x) + " ms"; }
function num(x, d = 3) { return x == null ? "–" : Number(x).toFixed(d); }
function signed(x) { return (x >= 0 ? "+" : "") + Number(x).toFixed(3); }

// A saving is never shown without its quality change (estimated, and measured where judged).
function estimatedChange(q) {
  if (!q.quality_change_known) return "quality change unknown";
  return q.estimated_quality_change == null ? "unknown"
    : `${signed(q.estimated_quality_change)}` +
      (q.estimated_n < q.compared ? ` (on ${q.estimated_n} of ${q.compared})` : "");
}
function measuredChange(q) {
  if (q.measured_quality_change == null) return "n/a";
  if (q.measured_n === 0) {
    const on = q.against === "strongest" ? "the strongest" : "the reference";
    return `${signed(q.measured_quality_change)} (every request on ${on})`;
  }
  return `${signed(q.measured_quality_change)} (n=${q.measured_n})`;
}
function qualityLine(q) {
  if (!q.quality_change_known) return "quality change unknown";
  return `quality change: estimated ${estimatedChange(q)}, measured ${measuredChange(q)}`;
}

function label(iso, bucketSeconds) {
  const d = new Date(iso);
  const p = (n) => String(n).padStart(2, "0");
  const hm = `${p(d.getUTCHours())}:${p(d.getUTCMinutes())}`;
  if (bucketSeconds < 60) return `${hm}:${p(d.getUTCSeconds())}`;
  if (bucketSeconds < 86400) return `${p(d.getUTCMonth() + 1)}-${p(d.getUTCDate())} ${hm}`;
  return `${d.getUTCFullYear()}-${p(d.getUTCMonth() + 1)}-${p(d.getUTCDate())}`;
}

async function api(path, tries = 3) {
  const params = new URLSearchParams({ window: state.window });
  if (state.tenant) params.set("tenant", state.tenant);
  const sep = path.includes("?") ? "&" : "?";
  const r = await fetch(`/dashboard/api/${path}${sep}${params}`, { credentials: "same-origin" });
  if (r.status === 429 && tries > 1) {  // rate limited or busy: wait as told, then again
    const wait = Math.min(60, Number(r.headers.get("retry-after")) || 1);
    await new Promise((done) => setTimeout(done, wait * 1000));
    return api(path, tries - 1);
  }
  if (r.status === 401) { window.location.assign("/dashboard"); throw new Error("signed out"); }
  const body = await r.json();
  if (!r.ok) throw new Error(body.error ? body.error.message : r.statusText);
  return body;
}

function draw(id, config) {
  if (charts[id]) charts[id].destroy();
  config.options = Object.assign({
    responsive: true, maintainAspectRatio: false, animation: false,
    interaction: { mode: "index", intersect: false },
    plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
  }, config.options || {});
  charts[id] = new Chart(document.getElementById(id), config);
}

function card(title, value, sub) {
  return el("div", { class: "card" }, el("div", { class: "label" }, title),
            el("div", { class: "value" }, value), el("div", { class: "sub" }, sub || ""));
}

function renderCards(s) {
  const o = s.rates.overall, sv = s.saving, fb = s.feedback, lat = s.latency.total_ms;
  const spent = s.spend.reduce((a, t) => a + (t.spent_usd || 0), 0);
  const cards = document.getElementById("cards");
  cards.replaceChildren(
    card("requests", String(o.requests), `${s.window} window`),
    card("spend this period", usd(spent), `${s.spend.length} tenant(s)`),
    card("estimated saving", sv.saving_share == null ? "–" : pct(sv.saving_share),
         `${usd(sv.saving_usd)} on routed requests vs each route's reference ` +
         `(passthrough, the client's choice, not counted); ` + qualityLine(sv)),
    card("latency p50 / p95", `${ms(lat.p50)}`, `p95 ${ms(lat.p95)}, p99 ${ms(lat.p99)}`),
    card("client errors (4xx)", pct(o.client_error_rate),
         `${o.client_errors} request(s): key, input, budget or rate limit`),
    card("upstream failures (5xx)", pct(o.upstream_error_rate),
         `${o.upstream_errors} request(s) no backend answered`),
    card("fallback rate", pct(o.fallback_rate), `${o.fallbacks} request(s) fell back`),
    card("feedback coverage", pct(fb.coverage),
         `${fb.with_feedback}/${fb.answered} answered, mean ${num(fb.mean_score, 2)}`),
  );
}

function renderCharts(s) {
  const labels = s.buckets.map((b) => label(b, s.bucket_seconds));
  const spendSets = [];
  s.spend.forEach((t, i) => {
    const c = PALETTE[i % PALETTE.length];
    spendSets.push({ label: `${t.tenant} spend`, data: t.spend, borderColor: c,
                     backgroundColor: c, tension: 0.1, pointRadius: 2, spanGaps: true });
    if (t.budget_usd != null) {
      spendSets.push({ label: `${t.tenant} budget (${t.period})`,
                       data: labels.map(() => t.budget_usd), borderColor: c,
                       borderDash: [6, 4], pointRadius: 0, borderWidth: 1 });
    }
  });
  draw("chart-spend", { type: "line", data: { labels, datasets: spendSets },
    options: { scales: { y: { beginAtZero: true, title: { display: true, text: "USD" } } } } });

  draw("chart-mix", { type: "bar", data: { labels, datasets: s.model_mix.models.map((m, i) => ({
      label: m, data: s.model_mix.series[m], backgroundColor: PALETTE[i % PALETTE.length] })) },
    options: { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true,
      title: { display: true, text: "requests" } } } } });

  const sv = s.saving;
  document.getElementById("saving-caption").textContent =
    "Cumulative cost of routed requests: actual vs each route's reference (estimate); " +
    qualityLine(sv);
  draw("chart-saving", { type: "line", data: { labels, datasets: [
      { label: "routed (actual)", data: sv.cumulative_actual || [], borderColor: PALETTE[2],
        backgroundColor: PALETTE[2], pointRadius: 2 },
      { label: "the references (estimated)", data: sv.cumulative_comparator || [],
        borderColor: PALETTE[0], backgroundColor: PALETTE[0], borderDash: [6, 4],
        pointRadius: 2 } ] },
    options: { scales: { y: { beginAtZero: true, title: { display: true, text: "USD" } } } } });

  draw("chart-latency", { type: "line", data: { labels, datasets: [
      { label: "p50", data: s.latency.series.p50, borderColor: PALETTE[1],
        backgroundColor: PALETTE[1], spanGaps: true, pointRadius: 2 },
      { label: "p95", data: s.latency.series.p95, borderColor: PALETTE[3],
        backgroundColor: PALETTE[3], spanGaps: true, pointRadius: 2 } ] },
    options: { scales: { y: { beginAtZero: true, title: { display: true, text: "ms" } } } } });

  draw("chart-rates", { type: "line", data: { labels, datasets: [
      { label: "upstream failures (5xx)", data: s.rates.upstream_error_rate,
        borderColor: PALETTE[0], backgroundColor: PALETTE[0], spanGaps: true, pointRadius: 2 },
      { label: "client errors (4xx)", data: s.rates.client_error_rate, borderColor: PALETTE[3],
        backgroundColor: PALETTE[3], spanGaps: true, pointRadius: 2 },
      { label: "fallback rate", data: s.rates.fallback_rate, borderColor: PALETTE[4],
        backgroundColor: PALETTE[4], spanGaps: true, pointRadius: 2 } ] },
    options: { scales: { y: { beginAtZero: true, max: 1,
      ticks: { callback: (v) => Math.round(v * 100) + "%" } } } } });

  const pm = s.feedback.per_model;
  draw("chart-feedback", { type: "bar", data: { labels: pm.map((m) => m.model), datasets: [
      { label: "coverage", data: pm.map((m) => m.coverage), backgroundColor: PALETTE[5] },
      { label: "mean score", data: pm.map((m) => m.mean_score), backgroundColor: PALETTE[6] } ] },
    options: { scales: { y: { beginAtZero: true, max: 1 } } } });

  const rows = [["", "p50", "p90", "p95", "p99"]];
  for (const [name, key] of [["total latency", "total_ms"], ["time to first token", "ttft_ms"]]) {
    const p = s.latency[key];
    rows.push([name, ms(p.p50), ms(p.p90), ms(p.p95), ms(p.p99)]);
  }
  const t = document.getElementById("latency-table");
  t.replaceChildren(...rows.map((r, i) =>
    el("tr", {}, ...r.map((c) => el(i === 0 ? "th" : "td", {}, c)))));
}

function renderRouteSavings(s) {
  const rows = (s.route_savings || []).map((r) => r.against == null ? [
    r.route, "the client's choice", "–", "–", r.quality_change, "–", String(r.requests),
  ] : [
    r.route,
    r.reference ? (r.against === "reference" ? r.reference : `${r.reference} (strongest)`)
                : "–",
    r.promise == null ? (r.against === "reference" ? "promise" : "none (strongest model)")
                      : `within ${r.promise}`,
    r.saving_share == null ? "–" : `${pct(r.saving_share)} (${usd(r.saving_usd)})`,
    r.compared ? estimatedChange(r) : "no requests compared",
    r.compared ? measuredChange(r) : "n/a",
    r.compared === r.requests ? String(r.requests) : `${r.compared} of ${r.requests}`,
  ]);
  table("route-savings", ["route", "reference", "promise", "saving",
    "estimated quality change", "measured quality change (n)", "requests"], rows,
    (i) => ({ "data-route": s.route_savings[i].route }));
}

function renderLearning(s) {
  const section = document.getElementById("route-learning").parentElement;
  const rows = s.learning || [];
  section.hidden = rows.length === 0;
  table("route-learning", ["route", "judge", "judged outcomes", "saving now",
    "exploration spent / allowed", "next saving expected"], rows.map((r) => [
    r.route,
    r.exploring ? (r.judge || "–") : "off",
    String(r.judged_outcomes),
    r.saving_share == null ? "–" : pct(r.saving_share),
    `${usd(r.exploration_spent_usd)} / ${usd(r.exploration_allowed_usd)}` +
      (r.max_share == null ? "" : ` (≤ ${pct(r.max_share)} of spend)`),
    r.next_saving == null ? "–" : `${r.next_saving.backend}: ${pct(r.next_saving.saving_if_certified)}` +
      ` cheaper, estimated drop ${r.next_saving.estimated_drop.toFixed(3)} vs ${r.next_saving.max_drop}` +
      ` (${r.next_saving.known || "unknown"})`,
  ]), (i) => ({ "data-route": rows[i].route }));
}

function renderExploration(s) {
  const section = document.getElementById("exploration-section");
  const spend = s.exploration || {};
  const scopes = Object.keys(spend);
  section.hidden = scopes.length === 0;
  const rows = scopes.map((scope) => [
    scope === "" ? "all exploration (budget per period)" : scope.replace("reference:",
      "reference beside route ") + " (today)",
    usd(spend[scope].spent_usd), usd(spend[scope].reserved_usd), usd(spend[scope].budget_usd),
  ]);
  table("exploration-spend", ["scope", "spent", "reserved", "budget"], rows);
}

function renderBudgets(s) {
  const box = document.getElementById("budgets");
  if (!s.budgets.length) {
    box.replaceChildren(el("p", { class: "muted" }, "No tenant has a budget."));
    return;
  }
  box.replaceChildren(...s.budgets.map((b) => {
    const used = Math.min(100, b.percent_used);
    const ends = b.period_end ? `resets ${b.period_end.replace("T", " ").slice(0, 16)} UTC`
                              : "total budget (never resets)";
    const fill = el("div", { class: used >= 90 ? "fill high" : "fill" });
    fill.style.width = `${used}%`;  // CSSOM, not a style attribute (the page's CSP)
    return el("div", { class: "budget", "data-tenant": b.tenant },
      el("div", { class: "budget-label" }, el("span", {}, b.tenant),
         el("span", { class: "budget-pct" }, `${b.percent_used.toFixed(1)}%`)),
      el("div", { class: "bar" }, fill),
      el("div", { class: "sub" }, `${usd(b.spent_usd)} of ${usd(b.budget_usd)} ` +
                                  `(${b.period}) · ${ends}`));
  }));
}

async function renderSpendBy() {
  const [keys, users] = await Promise.all([api("spend?by=key"), api("spend?by=user")]);
  const budget = (b) => (b == null ? "none" : usd(b));
  table("spend-by-key", ["key", "developer", "requests", "billed", "key budget", "key spend (all time)"],
    keys.data.map((r) => [r.key_alias || r.key_id, r.user_id || "–", String(r.requests),
      usd(r.billed_usd), budget(r.max_budget_usd), usd(r.spend_usd)]),
    (i) => ({ "data-key": keys.data[i].key_id }));
  table("spend-by-user", ["developer", "requests", "billed", "keys", "max budget"],
    users.data.map((r) => [r.user_id || "(no user)", String(r.requests), usd(r.billed_usd),
      String(r.keys), budget(r.max_budget_usd)]),
    (i) => ({ "data-user": users.data[i].user_id || "" }));
}

async function renderRequests() {
  const body = await api(`requests?limit=${PAGE}&offset=${state.offset}`);
  document.getElementById("page-info").textContent = body.data.length
    ? `requests ${state.offset + 1}–${state.offset + body.data.length}` : "no requests";
  document.getElementById("prev-page").disabled = state.offset === 0;
  document.getElementById("next-page").disabled = !body.has_more;
  const tbody = document.querySelector("#requests tbody");
  tbody.replaceChildren(...body.data.map((r) => el("tr", { "data-id": r.id },
    el("td", {}, (r.created_at || "").replace("T", " ").slice(0, 19)),
    el("td", {}, r.tenant || ""), el("td", {}, r.route || ""),
    el("td", {}, r.chosen_model || ""), el("td", {}, r.status ?? ""),
    el("td", {}, usd(r.cost_usd)), el("td", {}, r.latency_ms == null ? "" : Math.round(r.latency_ms)),
    el("td", {}, r.attempts),
    el("td", {}, r.feedback_count ? `${r.feedback_count} × ${num(r.feedback_mean, 2)}` : "–"),
    el("td", {}, r.status >= 400 ? (r.error || "") : (r.reason || "")),
    el("td", {}, el("button", { type: "button", class: "explain", "data-id": r.id,
                                onclick: () => explain(r.id) }, "explain")))));
}

function facts(pairs) {
  const dl = document.getElementById("exp-facts");
  dl.replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function table(id, head, rows, rowAttrs) {
  const t = document.getElementById(id);
  t.replaceChildren(el("tr", {}, ...head.map((h) => el("th", {}, h))),
    ...rows.map((r, i) => el("tr", rowAttrs ? rowAttrs(i) : {}, ...r.map((c) => el("td", {}, c)))));
}

async function explain(id) {
  const r = await fetch(`/dashboard/api/explain/${encodeURIComponent(id)}`,
                        { credentials: "same-origin" });
  const e = await r.json();
  const box = document.getElementById("explanation");
  box.hidden = false;
  if (!r.ok) {
    document.getElementById("exp-summary").textContent = e.error.message;
    return;
  }
  box.dataset.id = e.id;
  document.getElementById("exp-summary").textContent = e.summary;
  facts([["request", e.id], ["time", e.created_at], ["route", e.route || "passthrough"],
         ["λ (cost weight)", e.cost_weight ?? "–"], ["router", e.router_version || "–"],
         ["answered by", e.answered_by || "–"], ["status", e.status],
         ["cost", usd(e.cost_usd)], ["latency", ms(e.latency_ms)],
         ["tokens in / out", `${e.usage.prompt_tokens ?? "–"} / ${e.usage.completion_tokens ?? "–"}`],
         ["equivalent set", (e.decision.equivalent || []).join(", ") || "–"],
         ["reason", e.decision.reason || "–"]]);
  const c = e.decision.candidates;
  table("exp-candidates", ["backend", "similarity q·e", "quality p̂", "cost c̃", "predicted USD",
                           "score a = p̂ − λc̃", "in E"],
        c.map((x) => [x.backend, num(x.similarity), num(x.quality), num(x.cost),
                      usd(x.cost_usd), num(x.score, 4), x.equivalent ? "yes" : ""]),
        (i) => ({ class: (c[i].chosen ? "chosen " : "") + (c[i].equivalent ? "equivalent" : "") }));
  // overrun: what the provider reported past the reservation, the operator's (not charged)
  table("exp-attempts", ["#", "backend", "status", "ms", "error", "overrun (operator's)"],
        e.attempts.map((a, i) => [i + 1, a.model, a.status, num(a.latency_ms, 1), a.error || "",
                                  a.overrun_usd ? usd(a.overrun_usd, 8) : ""]));
  table("exp-feedback", ["time", "score", "comment"],
        e.feedback.items.map((f) => [f.created_at || "", num(f.score, 2), f.comment || ""]));
  box.scrollIntoView({ block: "start" });
}

async function renderVersions() {
  const body = await api("routers");
  table("versions", ["version", "status", "requests served", "AUDC", "QNC", "peak",
                     "parent AUDC", "observations", "created"],
        body.data.map((v) => [v.version + (v.live ? " (live)" : ""), v.status || "",
                              v.requests, num(v.audc, 4), num(v.qnc, 3), num(v.peak, 4),
                              num(v.parent_audc, 4), v.n_observations ?? "–",
                              (v.created_at || v.first_seen || "").slice(0, 19)]));
  const live = body.data.find((v) => v.live && v.training);
  const train = document.getElementById("live-training");
  train.textContent = live ? `Live router ${live.version}, training: ` + Object.entries(
    live.training).map(([k, v]) => `${k} ${typeof v === "number" ? +v.toFixed(4) : v}`)
    .join(", ") : "";
  const box = document.getElementById("deferral");
  const withCurve = body.data.filter((v) => v.has_curve);
  box.replaceChildren(...withCurve.slice(0, 2).map((v) => el("figure", {},
    el("figcaption", {}, `Deferral curve of ${v.version}`),
    el("img", { src: `/dashboard/plot/deferral.png?version=${encodeURIComponent(v.version)}`,
                alt: `deferral curve of router ${v.version}` }))));
  if (!withCurve.length) {
    box.replaceChildren(el("p", { class: "muted" },
      "No stored evaluation curve yet: versions recorded by retraining show theirs here."));
  }
}

async function refresh() {
  document.body.dataset.ready = "false";
  const s = await api("summary");
  const sel = document.getElementById("tenant");
  if (sel && sel.options.length === 1) {
    for (const t of s.tenants) sel.append(el("option", { value: t.id }, t.name));
  }
  renderCards(s);
  renderRouteSavings(s);
  renderLearning(s);
  renderExploration(s);
  renderBudgets(s);
  renderCharts(s);
  await Promise.all([renderRequests(), renderVersions(), renderSpendBy()]);
  document.body.dataset.ready = "true";
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("window").addEventListener("change", (ev) => {
    state.window = ev.target.value; state.offset = 0; refresh();
  });
  const sel = document.getElementById("tenant");
  if (sel) {
    sel.addEventListener("change", (ev) => {
      state.tenant = ev.target.value; state.offset = 0; refresh();
    });
  }
  document.getElementById("refresh").addEventListener("click", () => refresh());
  document.getElementById("prev-page").addEventListener("click", () => {
    state.offset = Math.max(0, state.offset - PAGE); renderRequests();
  });
  document.getElementById("next-page").addEventListener("click", () => {
    state.offset += PAGE; renderRequests();
  });
  document.getElementById("close-explanation").addEventListener("click", () => {
    document.getElementById("explanation").hidden = true;
  });
  refresh().catch((err) => {
    document.getElementById("cards").replaceChildren(el("p", { class: "error" }, String(err)));
  });
});
