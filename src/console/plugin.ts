import { readdirSync, readFileSync } from "node:fs";
import { createHash } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";

/** Where the console's files live: plain ES modules, HTML and CSS, served as they are (no build step). */
const STATIC_DIR = new URL("./static/", import.meta.url);

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".ico": "image/x-icon",
};

/**
 * The page may load only its own files and talk only to this server: it holds API and admin keys,
 * so no third-party script, no inline script, no framing by another site.
 */
const SECURITY_HEADERS = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
};

interface StaticFile {
  body: Buffer;
  type: string;
  etag: string;
}

/** Reads the console's files once, at startup: a fixed set of names, so no request path reaches the disk. */
export function loadConsoleFiles(dir: URL = STATIC_DIR): Map<string, StaticFile> {
  const files = new Map<string, StaticFile>();
  for (const name of readdirSync(dir)) {
    const type = TYPES[name.slice(name.lastIndexOf("."))];
    if (!type) continue;
    const body = readFileSync(new URL(name, dir));
    files.set(name, { body, type, etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 22)}"` });
  }
  return files;
}

/** What the page is told about the server when it is served. */
export interface ConsoleOptions {
  /** Whether the admin API is on (the server has an admin key): the "Keys & usage" screen shows. */
  adminApi?: boolean;
}

/**
 * The page with `data-admin-api` on its <body>: the console then knows whether to show "Keys &
 * usage" without asking /admin/keys, whose 401 or 403 the browser would log as an error on every load.
 */
export function withServerFacts(page: StaticFile, opts: ConsoleOptions): StaticFile {
  if (opts.adminApi === undefined) return page;
  const body = Buffer.from(page.body.toString("utf8").replace("<body>", `<body data-admin-api="${opts.adminApi ? "on" : "off"}">`));
  return { ...page, body, etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 22)}"` };
}

/**
 * GET / (the console's page) and GET /ui/<file> (its scripts and styles). Registered by app.ts
 * unless the server runs with --no-ui.
 */
export async function consolePlugin(scope: FastifyInstance, opts: ConsoleOptions = {}): Promise<void> {
  const files = loadConsoleFiles();
  const index = files.get("index.html");
  if (index) files.set("index.html", withServerFacts(index, opts));
  const send = (file: StaticFile | undefined, request: FastifyRequest, reply: FastifyReply) => {
    if (!file) return reply.callNotFound();
    reply.headers(SECURITY_HEADERS).header("cache-control", "no-cache").header("etag", file.etag);
    if (request.headers["if-none-match"] === file.etag) return reply.status(304).send();
    return reply.type(file.type).send(file.body);
  };
  scope.get("/", (request, reply) => send(files.get("index.html"), request, reply));
  scope.get<{ Params: { file: string } }>("/ui/:file", (request, reply) => send(files.get(request.params.file), request, reply));
}
