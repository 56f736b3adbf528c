import { createHash, type Hash } from "node:crypto";
import { constants as fsConstants, createReadStream } from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";

import { cachedModelPath, defaultCacheDir, isComplete, partPath, sidecarPath, sidecarText } from "./cache-layout.ts";
import { formatHfRef, ModelSourceError, type ModelSource } from "./source.ts";

export type DownloadProgress = { received: number; total?: number };

export interface ResolveOptions {
  cacheDir?: string;
  endpoint?: string;
  progress?: (p: DownloadProgress) => void;
  signal?: AbortSignal;
  fetchImpl?: typeof fetch;
}

export class ModelDownloadError extends Error {
  /** HTTP status when the failure was a server answer rather than a transport problem. */
  readonly status?: number;
  constructor(message: string, options?: { status?: number; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "ModelDownloadError";
    this.status = options?.status;
  }
}

export const DEFAULT_HF_ENDPOINT = "https://huggingface.co";

const MAX_REDIRECTS = 10;
const SHA256_HEX = /^[0-9a-f]{64}$/;
const LOCAL_FILE_HINT = "Pass a local file instead: --model /path/to/model.gguf";

export function defaultEndpoint(): string {
  return process.env.PLINTH_HF_ENDPOINT || DEFAULT_HF_ENDPOINT;
}

/**
 * Returns an absolute path to a readable GGUF file for `src`, downloading hub files into
 * the cache (resuming an earlier partial download) when they are not there yet.
 */
export async function resolveModelPath(src: ModelSource, opts: ResolveOptions = {}): Promise<string> {
  if (src.kind === "file") return resolveLocalFile(src.path);

  const target = cachedModelPath(src, opts.cacheDir ?? defaultCacheDir());
  if (await isComplete(target)) return target;
  // Two concurrent downloads of the same file would append to the same .part file, so
  // callers in this process queue up; the later ones then find the finished file.
  return withTargetLock(target, async () => {
    if (await isComplete(target)) return target;
    await download(src, target, opts);
    return target;
  });
}

async function resolveLocalFile(p: string): Promise<string> {
  const abs = path.resolve(p);
  let isFile: boolean;
  try {
    isFile = (await fsp.stat(abs)).isFile();
    if (isFile) await fsp.access(abs, fsConstants.R_OK);
  } catch (err) {
    const code = errCode(err);
    if (code === "ENOENT" || code === "ENOTDIR") throw new ModelSourceError(`model file not found: ${abs}`);
    if (code === "EACCES" || code === "EPERM") throw new ModelSourceError(`model file is not readable (permission denied): ${abs}`);
    throw new ModelSourceError(`cannot read model file ${abs}: ${errMessage(err)}`);
  }
  if (!isFile) throw new ModelSourceError(`model path is not a regular file: ${abs}`);
  return abs;
}

// ---------------------------------------------------------------------------------------
// The cache layout (paths, the .sha256 sidecar that marks a verified download) is in
// cache-layout.ts.

const targetLocks = new Map<string, Promise<unknown>>();

async function withTargetLock<T>(key: string, fn: () => Promise<T>): Promise<T> {
  const previous = targetLocks.get(key) ?? Promise.resolve();
  const run = previous.then(fn, fn);
  const tail = run.catch(() => undefined);
  targetLocks.set(key, tail);
  try {
    return await run;
  } finally {
    if (targetLocks.get(key) === tail) targetLocks.delete(key);
  }
}

// ---------------------------------------------------------------------------------------

interface Ctx {
  ref: string;
  url: string;
  fetchImpl: typeof fetch;
  token?: string;
  signal?: AbortSignal;
  progress?: (p: DownloadProgress) => void;
}

function hubUrl(src: Extract<ModelSource, { kind: "hf" }>, endpoint: string): string {
  const enc = encodeURIComponent;
  const base = endpoint.replace(/\/+$/, "");
  const file = src.file.split("/").map(enc).join("/");
  return `${base}/${enc(src.owner)}/${enc(src.repo)}/resolve/${enc(src.revision)}/${file}`;
}

async function download(src: Extract<ModelSource, { kind: "hf" }>, target: string, opts: ResolveOptions): Promise<void> {
  const ctx: Ctx = {
    ref: formatHfRef(src),
    url: hubUrl(src, opts.endpoint ?? defaultEndpoint()),
    fetchImpl: opts.fetchImpl ?? globalThis.fetch,
    token: process.env.HF_TOKEN || undefined,
    signal: opts.signal,
    progress: opts.progress,
  };
  const part = partPath(target);
  try {
    await fsp.mkdir(path.dirname(target), { recursive: true });
  } catch (err) {
    throw new ModelDownloadError(`cannot create cache directory ${path.dirname(target)}: ${errMessage(err)}`, { cause: err });
  }

  // Each pass either finishes or deletes the .part file, so the second pass always starts
  // from zero and the loop cannot spin; the third bound is only a safety net.
  for (let attempt = 0; attempt < 3; attempt++) {
    const offset = await sizeOf(part);
    const { res, sha256 } = await fetchFollowingRedirects(ctx, offset);

    if (offset > 0 && res.status === 416) {
      await discardBody(res);
      const total = parseContentRange(res.headers.get("content-range"))?.total;
      if (total === undefined || total === offset) {
        // The server has nothing past what we hold: the earlier run got every byte but
        // stopped before verifying.
        const hash = await hashExisting(part, ctx);
        ctx.progress?.({ received: offset, total: offset });
        await finish(ctx, part, target, hash, sha256);
        return;
      }
      await removePart(part);
      continue;
    }

    if (offset > 0 && res.status === 206) {
      const range = parseContentRange(res.headers.get("content-range"));
      if (!range || range.start !== offset) {
        await discardBody(res);
        await removePart(part);
        continue;
      }
      const length = parseLength(res.headers.get("content-length"));
      const total = range.total ?? (length === undefined ? undefined : offset + length);
      const hash = await hashExisting(part, ctx);
      await receiveBody(ctx, res, part, "a", hash, offset, total);
      await finish(ctx, part, target, hash, sha256);
      return;
    }

    if (res.status === 200) {
      // Also the answer to a Range request from servers without range support: start over.
      const length = parseLength(res.headers.get("content-length"));
      const hash = createHash("sha256");
      await receiveBody(ctx, res, part, "w", hash, 0, length);
      await finish(ctx, part, target, hash, sha256);
      return;
    }

    await discardBody(res);
    throw statusError(ctx, res.status);
  }
  throw new ModelDownloadError(
    `cannot download ${ctx.ref}: the server keeps rejecting the resumed download; delete ${part} and try again`,
  );
}

async function fetchFollowingRedirects(ctx: Ctx, offset: number): Promise<{ res: Response; sha256?: string }> {
  let url = new URL(ctx.url);
  const origin = url.origin;
  let linked: string | undefined;

  // Redirects are followed by hand because the hub puts the file's sha256 (x-linked-etag)
  // on its redirect response, which an automatically followed fetch would hide; the CDN
  // that serves the bytes usually sends a different etag.
  for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
    const headers: Record<string, string> = {
      "user-agent": "plinth",
      // Byte ranges and the checksum refer to the stored bytes, so no transfer compression.
      "accept-encoding": "identity",
    };
    if (offset > 0) headers.range = `bytes=${offset}-`;
    // The CDN URLs the hub redirects to are pre-signed and reject a second credential.
    if (ctx.token && url.origin === origin) headers.authorization = `Bearer ${ctx.token}`;

    let res: Response;
    try {
      res = await ctx.fetchImpl(url, { headers, redirect: "manual", signal: ctx.signal });
    } catch (err) {
      throwIfAborted(ctx, err);
      throw networkError(ctx, url, err);
    }

    linked ??= sha256FromEtag(res.headers.get("x-linked-etag"));
    const location = res.headers.get("location");
    if (res.status >= 300 && res.status < 400 && res.status !== 304 && location) {
      await discardBody(res);
      url = new URL(location, url);
      continue;
    }
    if (res.type === "opaqueredirect") {
      // A browser-style fetch implementation hides redirect targets; let it follow them.
      try {
        res = await ctx.fetchImpl(url, { headers, redirect: "follow", signal: ctx.signal });
      } catch (err) {
        throwIfAborted(ctx, err);
        throw networkError(ctx, url, err);
      }
    }
    return { res, sha256: linked ?? sha256FromEtag(res.headers.get("etag")) };
  }
  throw new ModelDownloadError(`cannot download ${ctx.ref}: too many redirects (more than ${MAX_REDIRECTS})`);
}

async function receiveBody(
  ctx: Ctx,
  res: Response,
  part: string,
  flags: "a" | "w",
  hash: Hash,
  start: number,
  total: number | undefined,
): Promise<void> {
  let file: fsp.FileHandle;
  try {
    file = await fsp.open(part, flags);
  } catch (err) {
    await discardBody(res);
    throw new ModelDownloadError(`cannot write ${part}: ${errMessage(err)}`, { cause: err });
  }
  let received = start;
  try {
    if (!res.body) throw new Error("response has no body");
    const reader = res.body.getReader();
    for (;;) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (err) {
        throwIfAborted(ctx, err);
        throw new ModelDownloadError(
          `cannot download ${ctx.ref}: connection lost after ${formatMB(received)}${total ? ` of ${formatMB(total)}` : ""}` +
            ` (${describeNetworkError(err, new URL(ctx.url))}); run again to resume`,
          { cause: err },
        );
      }
      if (chunk.done) break;
      try {
        await file.write(chunk.value);
      } catch (err) {
        await reader.cancel().catch(() => undefined);
        throw new ModelDownloadError(`cannot write ${part}: ${errMessage(err)}`, { cause: err });
      }
      // Hash only what reached the disk, so the digest always matches the .part contents.
      hash.update(chunk.value);
      received += chunk.value.byteLength;
      ctx.progress?.({ received, total });
    }
  } finally {
    await file.close().catch(() => undefined);
  }
  if (total !== undefined && received !== total) {
    throw new ModelDownloadError(
      `cannot download ${ctx.ref}: the server sent ${received} of ${total} bytes; run again to resume`,
    );
  }
}

async function finish(ctx: Ctx, part: string, target: string, hash: Hash, expected: string | undefined): Promise<void> {
  const actual = hash.digest("hex");
  if (expected && actual !== expected) {
    await removePart(part);
    throw new ModelDownloadError(
      `checksum mismatch for ${ctx.ref}: expected sha256 ${expected}, got ${actual}; the corrupt download was deleted, run again to retry`,
    );
  }
  try {
    // A stale target must not pair with the new sidecar if we stop between the two steps.
    await fsp.rm(target, { force: true });
    const side = sidecarPath(target);
    const tmp = `${side}.tmp`;
    await fsp.writeFile(tmp, sidecarText(target, actual));
    await fsp.rename(tmp, side);
    await fsp.rename(part, target);
  } catch (err) {
    throw new ModelDownloadError(`cannot store ${target}: ${errMessage(err)}`, { cause: err });
  }
}

async function hashExisting(part: string, ctx: Ctx): Promise<Hash> {
  const hash = createHash("sha256");
  try {
    for await (const chunk of createReadStream(part, { signal: ctx.signal })) hash.update(chunk as Buffer);
  } catch (err) {
    throwIfAborted(ctx, err);
    throw new ModelDownloadError(`cannot read partial download ${part}: ${errMessage(err)}`, { cause: err });
  }
  return hash;
}

// ---------------------------------------------------------------------------------------

function statusError(ctx: Ctx, status: number): ModelDownloadError {
  const what = `cannot download ${ctx.ref}`;
  const tokenNote = ctx.token ? "HF_TOKEN is set but does not grant access" : "set HF_TOKEN to an access token";
  let msg: string;
  switch (status) {
    case 401:
      // The hub answers 401 both for private/gated repos and for repos that do not exist.
      msg = `${what}: HTTP 401 unauthorized; the repository is private or gated (${tokenNote}), or it does not exist (check the name)`;
      break;
    case 403:
      msg = `${what}: HTTP 403 forbidden; the repository is gated or private: accept its terms on the hub and ${ctx.token ? "check that HF_TOKEN has access" : "set HF_TOKEN to an access token"}`;
      break;
    case 404:
      msg = `${what}: HTTP 404 not found; check the owner, repository, revision and file name`;
      break;
    case 429:
      msg = `${what}: HTTP 429 too many requests; the hub is rate limiting, wait a while${ctx.token ? "" : " or set HF_TOKEN"} and try again`;
      break;
    default:
      msg =
        status >= 500
          ? `${what}: HTTP ${status} server error; try again later`
          : `${what}: unexpected HTTP ${status} from ${new URL(ctx.url).host}`;
  }
  return new ModelDownloadError(msg, { status });
}

function networkError(ctx: Ctx, url: URL, err: unknown): ModelDownloadError {
  return new ModelDownloadError(
    `cannot download ${ctx.ref}: ${describeNetworkError(err, url)}. No network? ${LOCAL_FILE_HINT}`,
    { cause: err },
  );
}

function describeNetworkError(err: unknown, url: URL): string {
  const host = url.host;
  // fetch reports "fetch failed" / "terminated" and keeps the useful part in `cause`,
  // sometimes as an AggregateError holding one error per address tried.
  const chain: unknown[] = [];
  for (let e: unknown = err; e && chain.length < 8; e = (e as { cause?: unknown }).cause) {
    chain.push(e);
    if (e instanceof AggregateError) chain.push(...e.errors);
  }
  const codes = chain.map(errCode).filter((c): c is string => !!c);
  const has = (...wanted: string[]) => codes.some((c) => wanted.includes(c));
  if (has("ENOTFOUND")) return `cannot resolve host ${url.hostname}`;
  if (has("EAI_AGAIN")) return `DNS lookup for ${url.hostname} failed`;
  if (has("ECONNREFUSED")) return `connection to ${host} refused`;
  if (has("ENETUNREACH", "EHOSTUNREACH", "ENETDOWN")) return `network unreachable for ${host}`;
  if (has("ETIMEDOUT", "UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT")) return `connection to ${host} timed out`;
  if (has("ECONNRESET", "UND_ERR_SOCKET", "EPIPE")) return `connection to ${host} was closed unexpectedly`;
  // fetch refuses a fixed list of ports (1, 25, 6000, ...) before connecting.
  if (chain.some((e) => e instanceof Error && e.message === "bad port")) return `fetch does not allow connecting to port ${url.port}`;
  const deepest = chain.filter((e) => e instanceof Error).pop();
  return oneLine(deepest ? errMessage(deepest) : String(err));
}

function throwIfAborted(ctx: Ctx, err: unknown): void {
  if (ctx.signal?.aborted) throw ctx.signal.reason ?? err;
}

/** Accepts `abc`, `"abc"` and `W/"abc"`; returns the digest only when it looks like a sha256. */
function sha256FromEtag(value: string | null): string | undefined {
  if (!value) return undefined;
  const v = value.trim().replace(/^W\//i, "").replace(/^"(.*)"$/, "$1").toLowerCase();
  return SHA256_HEX.test(v) ? v : undefined;
}

function parseContentRange(value: string | null): { start: number; total?: number } | undefined {
  if (!value) return undefined;
  const m = /^bytes\s+(?:(\d+)-(\d+)|\*)\/(\d+|\*)$/i.exec(value.trim());
  if (!m) return undefined;
  const total = m[3] === "*" ? undefined : Number(m[3]);
  return { start: m[1] === undefined ? -1 : Number(m[1]), total };
}

function parseLength(value: string | null): number | undefined {
  if (!value || !/^\d+$/.test(value.trim())) return undefined;
  return Number(value);
}

async function discardBody(res: Response): Promise<void> {
  await res.body?.cancel().catch(() => undefined);
}

async function sizeOf(file: string): Promise<number> {
  try {
    return (await fsp.stat(file)).size;
  } catch {
    return 0;
  }
}

async function removePart(part: string): Promise<void> {
  await fsp.rm(part, { force: true }).catch(() => undefined);
}

function errCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

function errMessage(err: unknown): string {
  return oneLine(err instanceof Error ? err.message : String(err));
}

function oneLine(s: string): string {
  return s.replace(/\s*\n\s*/g, " ").trim();
}

function formatMB(bytes: number): string {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}
