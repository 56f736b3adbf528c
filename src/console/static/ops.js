// @ts-check
// The operator's view: models and serving endpoints (ops-models.js, ops-endpoints.js) and live
// charts from /metrics, polled while the screen is shown.

import { ApiError, request } from "./api.js";
import { LineChart } from "./chart.js";
import { initOpsAdmin } from "./ops-admin.js";
import { refreshEndpoints } from "./ops-endpoints.js";
import { initOpsModels, refreshModels } from "./ops-models.js";

/**
 * Sums each series of a Prometheus text exposition by metric name (labels added together); `max`
 * keeps the largest value per name instead.
 * @param {string} text
 * @returns {{ sum: Map<string, number>, max: Map<string, number> }}
 */
export function parseMetrics(text) {
  const sum = new Map();
  const max = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{.*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const v = Number(m[3]);
    if (!Number.isFinite(v)) continue;
    sum.set(m[1], (sum.get(m[1]) ?? 0) + v);
    max.set(m[1], Math.max(max.get(m[1]) ?? -Infinity, v));
  }
  return { sum, max };
}

const charts = {
  throughput: new LineChart("Throughput", "tokens/s"),
  ttft: new LineChart("Time to first token", "ms"),
  queue: new LineChart("Queue depth", "requests"),
  running: new LineChart("Running", "requests"),
  kv: new LineChart("KV cache usage", "%"),
};

/** @type {{ at: number, tokens: number, ttftSum: number, ttftCount: number } | undefined} */
let last;
/** @type {number | undefined} */
let timer;
let ticks = 0;
/** Whether the Operator screen is shown (polling then runs while the tab is not hidden too). */
let shown = false;
/** No polling before this time (ms since the epoch): a 429's Retry-After is honoured. */
let quietUntil = 0;

/**
 * Polling spends the API key's requests per minute: after a 429 it waits as long as the server
 * asks (Retry-After, else a minute) before asking again.
 * @param {unknown} err
 */
function backOff(err) {
  if (!(err instanceof ApiError) || err.status !== 429) return;
  quietUntil = Date.now() + (err.retryAfter && err.retryAfter > 0 ? err.retryAfter : 60) * 1000;
}

async function sample() {
  let text;
  try {
    text = await request("/metrics");
  } catch (err) {
    backOff(err);
    status(`Metrics unavailable: ${/** @type {Error} */ (err).message}`);
    return;
  }
  status("");
  const { sum, max } = parseMetrics(text);
  const now = performance.now();
  const cur = {
    at: now,
    tokens: sum.get("vllm:generation_tokens_total") ?? 0,
    ttftSum: sum.get("vllm:time_to_first_token_seconds_sum") ?? 0,
    ttftCount: sum.get("vllm:time_to_first_token_seconds_count") ?? 0,
  };
  if (last) {
    const dt = (now - last.at) / 1000;
    charts.throughput.push(dt > 0 ? Math.max(0, cur.tokens - last.tokens) / dt : 0);
    const n = cur.ttftCount - last.ttftCount;
    // Mean TTFT of the requests that got their first token during the interval (0 when none did).
    charts.ttft.push(n > 0 ? ((cur.ttftSum - last.ttftSum) / n) * 1000 : 0);
  }
  last = cur;
  charts.queue.push(sum.get("vllm:num_requests_waiting") ?? 0);
  charts.running.push(sum.get("vllm:num_requests_running") ?? 0);
  // vLLM's gauge is a fraction per model; the chart shows the fullest model.
  charts.kv.push(Math.max(0, max.get("vllm:kv_cache_usage_perc") ?? 0) * 100);
}

/**
 * The charts' own status line, under their description (which keeps its /metrics link): not the
 * screen's first hint, which is the admin key form's.
 * @param {string} text
 */
function status(text) {
  const p = /** @type {HTMLElement} */ (document.getElementById("metrics-status"));
  p.hidden = !text;
  p.textContent = text;
}

/** Metrics are sampled every 2 s; models and endpoints every LIST_EVERY samples (12 s). */
const TICK_MS = 2000;
const LIST_EVERY = 6;

function lists() {
  void refreshModels().then(backOff);
  void refreshEndpoints().then(backOff);
}

/**
 * Starts or stops the polling: it runs only while the screen is shown and the tab is visible, as
 * the lists and metrics calls count against the API key's limits like any other request. Models
 * and endpoints change seldom: every 12 s is enough to see a model scale to zero or an update land.
 */
function poll() {
  const run = shown && document.visibilityState !== "hidden";
  if (run === (timer !== undefined)) return;
  clearInterval(timer);
  timer = undefined;
  if (!run) return;
  ticks = 0;
  if (Date.now() >= quietUntil) {
    lists();
    void sample();
  }
  timer = window.setInterval(() => {
    if (Date.now() < quietUntil) return;
    void sample();
    if (++ticks % LIST_EVERY === 0) lists();
  }, TICK_MS);
}

/** The screen was shown or left (showing it again while shown asks nothing more). @param {boolean} visible */
export function setOpsVisible(visible) {
  shown = visible;
  poll();
}

export function initOps() {
  document.addEventListener("visibilitychange", poll);
  document.getElementById("charts")?.append(...Object.values(charts).map((c) => c.root));
  initOpsAdmin();
  initOpsModels();
}
