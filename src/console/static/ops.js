// @ts-check
// The operator's view: models and serving endpoints (ops-models.js, ops-endpoints.js) and live
// charts from /metrics, polled while the screen is shown.

import { request } from "./api.js";
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

async function sample() {
  let text;
  try {
    text = await request("/metrics");
  } catch (err) {
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

/** Starts or stops the polling as the screen is shown or left. @param {boolean} visible */
export function setOpsVisible(visible) {
  clearInterval(timer);
  timer = undefined;
  if (!visible) return;
  const lists = () => {
    void refreshModels();
    void refreshEndpoints();
  };
  lists();
  void sample();
  // Metrics every 2 s; models and endpoints, which change seldom, every 4 s (enough to see a
  // model scale to zero or an update land).
  timer = window.setInterval(() => {
    void sample();
    if (++ticks % 2 === 0) lists();
  }, 2000);
}

export function initOps() {
  document.getElementById("charts")?.append(...Object.values(charts).map((c) => c.root));
  initOpsAdmin();
  initOpsModels();
}
