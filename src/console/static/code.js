// @ts-check
// "View code": the playground's next request as curl, Python openai and JavaScript openai.

import { chatPath, isDatabricks, streamBody } from "./targets.js";

/** Parameters the openai SDKs know by name; the rest travel in Python's `extra_body`. */
const SDK_PARAMS = new Set([
  "model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "logprobs", "top_logprobs",
  "tools", "tool_choice", "parallel_tool_calls", "response_format", "stop", "n", "frequency_penalty", "presence_penalty",
  "logit_bias", "stream", "stream_options", "reasoning_effort", "user", "metadata", "store", "service_tier",
]);

/**
 * The snippets' reading of a message's content: a string, or (a serving endpoint whose model
 * reasons streams Databricks' form) a list of parts, of which the text parts are the answer and the
 * reasoning parts are left out.
 */
const JS_TEXT = [
  "// content is a string, or a list of parts (a serving endpoint whose model reasons): print the text parts.",
  "const text = (content) =>",
  '  Array.isArray(content) ? content.filter((p) => p.type === "text").map((p) => p.text).join("") : (content ?? "");',
];
const PY_TEXT = [
  "def text(content):",
  '    """content is a string, or a list of parts (a serving endpoint whose model reasons): the text parts."""',
  "    if isinstance(content, list):",
  '        return "".join(p.get("text", "") for p in content if p.get("type") == "text")',
  '    return content or ""',
];

/** @param {string} s */
const shellQuote = (s) => `'${s.replaceAll("'", `'\\''`)}'`;

/**
 * A JSON value written as a Python literal.
 * @param {unknown} v @param {string} indent
 * @returns {string}
 */
export function pythonLiteral(v, indent = "") {
  const inner = indent + "    ";
  if (v === null || v === undefined) return "None";
  if (v === true) return "True";
  if (v === false) return "False";
  if (typeof v === "number" || typeof v === "string") return JSON.stringify(v);
  if (Array.isArray(v)) return v.length === 0 ? "[]" : `[\n${v.map((x) => inner + pythonLiteral(x, inner)).join(",\n")},\n${indent}]`;
  const entries = Object.entries(/** @type {Record<string, unknown>} */ (v));
  if (entries.length === 0) return "{}";
  return `{\n${entries.map(([k, x]) => `${inner}${JSON.stringify(k)}: ${pythonLiteral(x, inner)}`).join(",\n")},\n${indent}}`;
}

/**
 * @param {Record<string, unknown>} body
 * @param {import("./targets.js").Target} [target] a serving endpoint is reached at its invocations
 *   URL by curl, and through base_url=<host>/serving-endpoints by the SDKs (`model` names it)
 */
export function snippets(body, target) {
  const db = target !== undefined && isDatabricks(target);
  const base = location.origin;
  const sdkBase = `${base}${db ? "/serving-endpoints" : "/v1"}`;
  const json = JSON.stringify(body, null, 2);
  const curlJson = db && target ? JSON.stringify(streamBody(target, body), null, 2) : json;
  const curl = [
    `curl ${base}${target ? chatPath(target) : "/v1/chat/completions"} \\`,
    `  -H 'content-type: application/json' \\`,
    `  -H "authorization: Bearer $PLINTH_API_KEY" \\`,
    `  ${body.stream ? "-N " : ""}-d ${shellQuote(curlJson)}`,
  ].join("\n");

  const known = Object.entries(body).filter(([k]) => SDK_PARAMS.has(k));
  const extra = Object.fromEntries(Object.entries(body).filter(([k]) => !SDK_PARAMS.has(k)));
  const args = known.map(([k, v]) => `    ${k}=${pythonLiteral(v, "    ")},`);
  if (Object.keys(extra).length) args.push(`    extra_body=${pythonLiteral(extra, "    ")},`);
  const python = [
    "import os",
    "from openai import OpenAI",
    "",
    ...PY_TEXT,
    "",
    `client = OpenAI(base_url="${sdkBase}", api_key=os.environ.get("PLINTH_API_KEY", "unused"))`,
    "",
    "response = client.chat.completions.create(",
    ...args,
    ")",
    body.stream
      ? "for chunk in response:\n    if chunk.choices:\n        print(text(chunk.choices[0].delta.content), end=\"\", flush=True)"
      : "print(text(response.choices[0].message.content))",
  ].join("\n");

  const js = [
    'import OpenAI from "openai";',
    "",
    `const client = new OpenAI({ baseURL: "${sdkBase}", apiKey: process.env.PLINTH_API_KEY ?? "unused" });`,
    "",
    ...JS_TEXT,
    "",
    `const response = await client.chat.completions.create(${json});`,
    body.stream
      ? "for await (const chunk of response) process.stdout.write(text(chunk.choices[0]?.delta?.content));"
      : "console.log(text(response.choices[0].message.content));",
  ].join("\n");
  return { curl, python, js };
}

/**
 * Opens the code dialog for a request body.
 * @param {Record<string, unknown>} body @param {import("./targets.js").Target} [target]
 */
export function showCode(body, target) {
  const dialog = /** @type {HTMLDialogElement} */ (document.getElementById("code-dialog"));
  const text = /** @type {HTMLPreElement} */ (document.getElementById("code-text"));
  const code = snippets(body, target);
  const tabs = /** @type {HTMLButtonElement[]} */ ([...dialog.querySelectorAll("[role=tab]")]);
  /** @param {string} lang */
  const select = (lang) => {
    for (const t of tabs) t.setAttribute("aria-selected", String(t.dataset.lang === lang));
    text.textContent = code[/** @type {"curl" | "python" | "js"} */ (lang)];
  };
  for (const t of tabs) t.onclick = () => select(t.dataset.lang ?? "curl");
  const copy = /** @type {HTMLButtonElement} */ (document.getElementById("copy-code"));
  copy.onclick = () => void navigator.clipboard?.writeText(text.textContent ?? "");
  select(tabs.find((t) => t.getAttribute("aria-selected") === "true")?.dataset.lang ?? "curl");
  dialog.showModal();
}
