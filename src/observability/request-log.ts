import { createHash } from "node:crypto";
import { Writable } from "node:stream";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { requestKey, requestKeyName } from "../http/access.ts";
import { internalId } from "../http/internal-id.ts";
import { dialectOf, type PlinthMetrics } from "./metrics.ts";

export type LogFormat = "json" | "pretty" | "auto";

/**
 * Fastify's logger settings for a level and format: JSON lines (one object a line, for collectors),
 * or "pretty" (a short readable line, for a terminal). "auto": pretty on a terminal, JSON otherwise.
 */
export function loggerOptions(level: string, format: LogFormat, stream: NodeJS.WritableStream = process.stdout) {
  const isTty = (stream as { isTTY?: boolean }).isTTY === true;
  const pretty = format === "pretty" || (format === "auto" && isTty);
  return { level, stream: pretty ? prettyStream(stream) : stream };
}

/** A stable, non-reversible name for a namespace (the end user a request names): never the raw value. */
export function namespaceHash(namespace: string | undefined): string | undefined {
  return namespace === undefined ? undefined : createHash("sha256").update(namespace).digest("hex").slice(0, 16);
}

/**
 * One log line per request, written as the response ends: its id, dialect, route, model, namespace
 * hash, status, token counts, time to first token, duration and finish reason. Request and response
 * bodies only with `bodies` (they hold prompts and answers).
 */
export function installRequestLog(app: FastifyInstance, metrics: PlinthMetrics, opts: { bodies: boolean }): void {
  if (opts.bodies) {
    app.addHook("onSend", async (request, _reply, payload) => {
      if (typeof payload === "string") responseBodies.set(request, payload);
      return payload;
    });
  }
  // A client that goes away before the response ends (a cancelled stream, a timeout on its side)
  // never reaches onResponse, which runs when the response finishes: its line is written once the
  // connection has closed and the generation has noticed, so cancelled requests are in the log
  // with what they had used.
  app.addHook("onRequest", (request, reply, done) => {
    reply.raw.once("close", () => {
      if (!reply.raw.writableFinished) metrics.afterGeneration(internalId(request), () => write(request, reply, true));
    });
    done();
  });
  app.addHook("onResponse", async (request, reply) => write(request, reply, false));
  // Answers written below Fastify (a malformed request line, headers too large, CONNECT, an Expect
  // header) have no request object: their line says what is known.
  app.refusals?.on((r) => {
    app.log.child({ request_id: r.requestId }).info({ dialect: "none", method: r.method, route: "unmatched", status: r.status, error_code: r.code }, "request");
  });

  function write(request: FastifyRequest, reply: FastifyReply, clientClosed: boolean): void {
    // Once: a response that fails while being written can reach both onResponse and close.
    if (logged.has(request)) return;
    logged.add(request);
    const route = request.routeOptions.url ?? "unmatched";
    if (route === "/metrics" || route === "/health" || route === "/ping") {
      request.log.debug({ route, status: reply.statusCode }, "request");
      return;
    }
    const facts = metrics.takeFacts(internalId(request));
    const body = request.body as { model?: unknown } | undefined;
    // The model a refused request named is the client's text: bounded like the ledger's column.
    const named = body && typeof body === "object" && typeof body.model === "string" ? body.model.slice(0, MAX_NAMED_MODEL) : undefined;
    const line: Record<string, unknown> = {
      dialect: dialectOf(route),
      method: request.method,
      route,
      model: facts?.model ?? named,
      namespace: namespaceHash(facts?.namespace),
      key: requestKey(request),
      key_name: requestKeyName(request),
      // What was sent, or nginx's 499 (client closed request) when nothing was.
      status: clientClosed && !reply.raw.headersSent ? 499 : reply.statusCode,
      prompt_tokens: facts?.promptTokens,
      cached_tokens: facts?.cachedTokens,
      completion_tokens: facts?.completionTokens,
      ttft_ms: facts?.ttftMs,
      duration_ms: Math.round(reply.elapsedTime),
      finish_reason: facts?.finishReason,
      error_code: clientClosed ? "client_closed" : (metrics.errorCodeOf(request) ?? facts?.errorCode),
    };
    // The admin API's bodies hold keys (a created key is in its answer): never logged.
    if (opts.bodies && !route.startsWith("/admin")) {
      line.request_body = request.body;
      line.response_body = responseBodies.get(request);
    }
    const level = line.status as number >= 500 ? "error" : "info";
    request.log[level](line, "request");
  }
}

/** Characters of a client-given model name a log line keeps (the ledger keeps as many). */
const MAX_NAMED_MODEL = 200;

const responseBodies = new WeakMap<object, string>();
const logged = new WeakSet<FastifyRequest>();

const LEVELS: Record<number, string> = { 10: "TRACE", 20: "DEBUG", 30: "INFO", 40: "WARN", 50: "ERROR", 60: "FATAL" };

/** Turns pino's JSON lines into `time LEVEL request_id msg key=value …` lines. */
function prettyStream(out: NodeJS.WritableStream): Writable {
  let pending = "";
  return new Writable({
    write(chunk: Buffer, _enc, done) {
      pending += chunk.toString("utf8");
      let nl: number;
      while ((nl = pending.indexOf("\n")) !== -1) {
        const raw = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        out.write(`${prettyLine(raw)}\n`);
      }
      done();
    },
  });
}

function prettyLine(raw: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(raw);
  } catch {
    return raw;
  }
  const { time, level, msg, request_id, pid: _pid, hostname: _host, ...rest } = o;
  const when = typeof time === "number" ? new Date(time).toISOString().slice(11, 23) : "";
  const fields = Object.entries(rest)
    .filter(([, v]) => v !== undefined)
    // A string with spaces, quotes or control characters is quoted: a client-given value (a model
    // name with a newline) must not be able to end the line and forge another.
    .map(([k, v]) => `${k}=${typeof v === "string" && /^[\x21-\x7e]*$/.test(v) && !v.includes('"') ? v : JSON.stringify(v)}`)
    .join(" ");
  return [when, LEVELS[level as number] ?? String(level), request_id, msg, fields].filter((p) => p !== undefined && p !== "").join(" ");
}
