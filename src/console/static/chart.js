// @ts-check
// Small SVG charts: a line over time (live metrics) and horizontal bars (usage).

const NS = "http://www.w3.org/2000/svg";

/**
 * @param {string} tag @param {Record<string, string | number>} attrs
 * @returns {SVGElement}
 */
function svg(tag, attrs) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

/** @param {number} v */
export const fmt = (v) => (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2));

/** A live line chart with a title, the latest value in words, and a fixed number of points. */
export class LineChart {
  /** @param {string} title @param {string} unit @param {number} [points] */
  constructor(title, unit, points = 60) {
    this.title = title;
    this.unit = unit;
    this.points = points;
    /** @type {number[]} */
    this.values = [];
    this.root = document.createElement("figure");
    this.root.className = "chart";
    this.caption = document.createElement("figcaption");
    this.caption.textContent = title;
    this.value = document.createElement("span");
    this.value.className = "chart-value";
    this.caption.append(" ", this.value);
    this.svg = svg("svg", { viewBox: "0 0 300 100", preserveAspectRatio: "none", role: "img", "aria-label": title });
    this.root.append(this.caption, this.svg);
  }

  /** @param {number} v */
  push(v) {
    this.values.push(v);
    if (this.values.length > this.points) this.values.shift();
    const max = Math.max(...this.values, 1e-9);
    const step = 300 / (this.points - 1);
    const offset = this.points - this.values.length;
    const coords = this.values.map((y, i) => `${((offset + i) * step).toFixed(1)},${(96 - (y / max) * 90).toFixed(1)}`);
    const line = svg("polyline", { points: coords.join(" "), fill: "none", class: "chart-line", "vector-effect": "non-scaling-stroke" });
    const top = svg("text", { x: 4, y: 12, class: "chart-scale" });
    top.textContent = `max ${fmt(max)} ${this.unit}`;
    this.svg.replaceChildren(svg("line", { x1: 0, y1: 96, x2: 300, y2: 96, class: "chart-axis" }), line, top);
    this.value.textContent = `${fmt(v)} ${this.unit}`;
    this.svg.setAttribute("aria-label", `${this.title}: ${fmt(v)} ${this.unit} now, at most ${fmt(max)} in the last ${this.values.length} samples`);
  }
}

/** The width of the labels' column, left of the bars (SVG units). */
const LABEL_WIDTH = 124;

/** Characters a label keeps before it is measured (about what 124 units hold at 12 px). */
const LABEL_CHARS = 20;

/**
 * Shortens a label to its column: key names run to 200 characters and model names in the ledger are
 * whatever a client asked for, and a long one was drawn over the bars and their numbers. The whole
 * label stays in the bar's <title> (a tooltip, and read by screen readers).
 * @param {SVGTextElement} text @param {string} label
 */
function fitLabel(text, label) {
  let shown = label.length > LABEL_CHARS ? `${label.slice(0, LABEL_CHARS - 1)}…` : label;
  text.textContent = shown;
  // Measured where the chart is laid out (0 while hidden): wide letters take more room.
  while (shown.length > 2 && text.getComputedTextLength() > LABEL_WIDTH) {
    shown = `${shown.slice(0, -2)}…`;
    text.textContent = shown;
  }
}

/**
 * Horizontal bars, one per row, labelled with the value.
 * @param {HTMLElement} host @param {{ label: string, value: number, note?: string }[]} rows @param {string} title
 */
export function barChart(host, rows, title) {
  const max = Math.max(...rows.map((r) => r.value), 1);
  const height = rows.length * 26 + 4;
  const root = svg("svg", { viewBox: `0 0 600 ${height}`, role: "img", "aria-label": title, class: "bars", width: "100%" });
  host.replaceChildren(root);
  rows.forEach((r, i) => {
    const y = 4 + i * 26;
    const row = svg("g", { class: "bar-row" });
    const tip = svg("title", {});
    const valueText = `${r.value}${r.note ? ` ${r.note}` : ""}`;
    tip.textContent = `${r.label}: ${valueText}`;
    const label = /** @type {SVGTextElement} */ (svg("text", { x: 0, y: y + 15, class: "bar-label" }));
    const w = Math.max(1, (r.value / max) * 240);
    const bar = svg("rect", { x: 130, y, width: w.toFixed(1), height: 20, class: "bar" });
    const value = svg("text", { x: 134 + w, y: y + 15, class: "bar-value" });
    value.textContent = valueText;
    row.append(tip, label, bar, value);
    root.append(row);
    fitLabel(label, r.label);
  });
}
