import { test, after } from "node:test";
import assert from "../helpers/assert.ts";
import { createHash } from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";

import { DEFAULT_MODEL, ModelSourceError, parseModelArg, type ModelSource } from "../../src/models/source.ts";
import { listCachedModels } from "../../src/models/cache-list.ts";
import { modelSpecs } from "../../src/config/models.ts";
import { configSchema } from "../../src/config/schema.ts";
import { ModelDownloadError, resolveModelPath } from "../../src/models/download.ts";

// ---- fixture data ----------------------------------------------------------------------

const SIZE = 3 * 1024 * 1024 + 123; // odd size so ranges do not line up with chunk sizes
const DATA = makeData(SIZE);
const SHA = createHash("sha256").update(DATA).digest("hex");
const FILE_PATH = "/owner/repo/resolve/main/model.gguf";
const SRC: ModelSource = { id: "model", kind: "hf", owner: "owner", repo: "repo", revision: "main", file: "model.gguf" };

function makeData(n: number): Buffer {
  // xorshift32: deterministic and incompressible enough that a wrong offset changes the hash.
  const buf = Buffer.alloc(n);
  let x = 0x12345678;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    buf[i] = x & 0xff;
  }
  return buf;
}

interface ServerOptions {
  /** On the first request, send this many body bytes and then cut the connection. */
  dropFirstAfter?: number;
  /** Value of x-linked-etag; defaults to the real digest. */
  linkedEtag?: string;
  /** Serve the hub path as a redirect to /cdn/model.gguf, with the etag only on the redirect. */
  redirect?: boolean;
}

interface SeenRequest {
  url: string;
  range?: string;
  authorization?: string;
}

async function startServer(opts: ServerOptions = {}) {
  const seen: SeenRequest[] = [];
  const server = http.createServer((req, res) => {
    seen.push({ url: req.url ?? "", range: req.headers.range, authorization: req.headers.authorization });
    const etag = opts.linkedEtag ?? SHA;

    if (opts.redirect && req.url === FILE_PATH) {
      res.writeHead(302, { location: "/cdn/model.gguf", "x-linked-etag": `"${etag}"` });
      res.end();
      return;
    }
    const servesFile = opts.redirect ? req.url === "/cdn/model.gguf" : req.url === FILE_PATH;
    if (!servesFile) {
      res.writeHead(404, { "content-type": "text/plain" });
      res.end("Entry not found");
      return;
    }

    const headers: http.OutgoingHttpHeaders = { "accept-ranges": "bytes", "content-type": "application/octet-stream" };
    if (!opts.redirect) headers["x-linked-etag"] = `"${etag}"`;

    let start = 0;
    const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
    if (m) {
      start = Number(m[1]);
      if (start >= SIZE) {
        res.writeHead(416, { ...headers, "content-range": `bytes */${SIZE}` });
        res.end();
        return;
      }
      res.writeHead(206, { ...headers, "content-range": `bytes ${start}-${SIZE - 1}/${SIZE}`, "content-length": SIZE - start });
    } else {
      res.writeHead(200, { ...headers, "content-length": SIZE });
    }

    if (opts.dropFirstAfter !== undefined && seen.length === 1) {
      // Let the bytes reach the client before cutting the connection short of content-length.
      res.write(DATA.subarray(start, start + opts.dropFirstAfter), () => {
        setTimeout(() => req.socket.destroy(), 100);
      });
      return;
    }
    res.end(DATA.subarray(start));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  servers.push(server);
  return { endpoint: `http://127.0.0.1:${port}`, seen };
}

const servers: http.Server[] = [];
const tempDirs: string[] = [];
after(() => {
  for (const s of servers) s.close();
  for (const d of tempDirs) fs.rmSync(d, { recursive: true, force: true });
});

function tempCache(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "plinth-dl-"));
  tempDirs.push(dir);
  return dir;
}

function targetIn(cacheDir: string): string {
  return path.join(cacheDir, "owner", "repo", "main", "model.gguf");
}

// ---- parseModelArg ---------------------------------------------------------------------

test("parseModelArg: local paths, names and ~", () => {
  assert.deepEqual(parseModelArg("/models/llama-3.gguf"), { id: "llama-3", kind: "file", path: "/models/llama-3.gguf" });
  assert.deepEqual(parseModelArg("chat=./m/qwen.Q4.gguf"), { id: "chat", kind: "file", path: "./m/qwen.Q4.gguf" });
  assert.deepEqual(parseModelArg("weights.bin"), { id: "weights.bin", kind: "file", path: "weights.bin" });
  // "=" in what reads as a path is part of the path, not a name.
  assert.deepEqual(parseModelArg("/data/a=b/x.gguf"), { id: "x", kind: "file", path: "/data/a=b/x.gguf" });
  assert.deepEqual(parseModelArg("./a=b/x.gguf"), { id: "x", kind: "file", path: "./a=b/x.gguf" });
  assert.deepEqual(parseModelArg("../a=b/x.gguf"), { id: "x", kind: "file", path: "../a=b/x.gguf" });
  assert.deepEqual(parseModelArg("~/a=b/x.gguf"), { id: "x", kind: "file", path: path.join(os.homedir(), "a=b/x.gguf") });
  // Names may hold "/", as served model names often do (vLLM's `--served-model-name`).
  assert.deepEqual(parseModelArg("Qwen/Qwen2.5-7B-Instruct=./m/q.gguf"), { id: "Qwen/Qwen2.5-7B-Instruct", kind: "file", path: "./m/q.gguf" });
  assert.deepEqual(parseModelArg("acme/tiny:v1=hf:o/r/m.gguf"), { id: "acme/tiny:v1", kind: "hf", owner: "o", repo: "r", revision: "main", file: "m.gguf" });
  // ...unless the whole argument is a file that exists (a relative path with "=" in a folder's name).
  const dir = tempCache();
  fs.mkdirSync(path.join(dir, "a=b"), { recursive: true });
  fs.writeFileSync(path.join(dir, "a=b", "x.gguf"), "");
  const cwd = process.cwd();
  process.chdir(dir);
  try {
    assert.deepEqual(parseModelArg("a=b/x.gguf"), { id: "x", kind: "file", path: "a=b/x.gguf" });
    assert.deepEqual(parseModelArg("a=b/y.gguf"), { id: "a", kind: "file", path: "b/y.gguf" }, "no such file: a name");
  } finally {
    process.chdir(cwd);
  }
  assert.deepEqual(parseModelArg("m=~/x.gguf"), { id: "m", kind: "file", path: path.join(os.homedir(), "x.gguf") });
});

test("parseModelArg: hf references", () => {
  assert.deepEqual(parseModelArg(DEFAULT_MODEL), {
    id: "qwen2.5-0.5b-instruct-q4_k_m",
    kind: "hf",
    owner: "Qwen",
    repo: "Qwen2.5-0.5B-Instruct-GGUF",
    revision: "main",
    file: "qwen2.5-0.5b-instruct-q4_k_m.gguf",
  });
  assert.deepEqual(parseModelArg("small=hf:o/r@v1.2/sub/dir/m.GGUF"), {
    id: "small",
    kind: "hf",
    owner: "o",
    repo: "r",
    revision: "v1.2",
    file: "sub/dir/m.GGUF",
  });
});

test("parseModelArg: malformed input", () => {
  const bad: Array<[string, RegExp]> = [
    ["", /empty/],
    ["   ", /empty/],
    ["=x.gguf", /empty name/],
    ["my model=x.gguf", /whitespace/],
    ["name=", /no path/],
    ["hf:owner/repo", /does not name a file/],
    ["hf:owner", /does not name a file/],
    ["hf:owner/repo/", /invalid file path/],
    ["hf:owner/repo/model.bin", /not a \.gguf/],
    ["hf:owner/repo@/m.gguf", /empty revision/],
    ["hf:/repo/m.gguf", /empty owner/],
    ["hf:owner//m.gguf", /empty repository/],
    ["hf:owner/repo/../m.gguf", /invalid file path/],
    ["hf:ow ner/repo/m.gguf", /invalid owner/],
    ["/models/.gguf", /cannot derive a model name/],
    // "." and ".." are folded out of URL paths: a model so named could not be asked for or unloaded.
    ["..=/abs/tiny.gguf", /cannot be named "\.\."/],
    [".=/abs/tiny.gguf", /cannot be named "\."/],
    ["org/..=/abs/tiny.gguf", /cannot be named "org\/\.\."/],
    ["/models/..gguf", /cannot derive a model name/],
    ["/models/...gguf", /cannot derive a model name/],
  ];
  for (const [arg, re] of bad) {
    assert.throws(() => parseModelArg(arg), (err: unknown) => {
      assert.ok(err instanceof ModelSourceError, `${JSON.stringify(arg)} should throw ModelSourceError`);
      assert.match(err.message, re, `message for ${JSON.stringify(arg)}`);
      return true;
    });
  }
  // A name makes an id-less file acceptable.
  assert.equal(parseModelArg("x=/models/.gguf").kind, "file");
  assert.equal(parseModelArg("/models/...gguf", "x").id, "x");
});

test("parseModelArg: a name given apart (a config file's {name, source}) is checked as a name, never read as a path", () => {
  assert.deepEqual(parseModelArg("/abs/tiny.gguf", "chat"), { id: "chat", kind: "file", path: "/abs/tiny.gguf" });
  // Joined with "=" these read as paths ("../=…", "/x=…"); apart they are names, and ".." is refused.
  assert.throws(() => parseModelArg("/abs/tiny.gguf", ".."), /cannot be named "\.\."/);
  assert.throws(() => parseModelArg("/abs/tiny.gguf", "."), /cannot be named "\."/);
  assert.throws(() => parseModelArg("/abs/tiny.gguf", "my model"), /whitespace/);
  assert.deepEqual(parseModelArg("a=b.gguf", "n"), { id: "n", kind: "file", path: "a=b.gguf" }, "the source is all path");
  assert.deepEqual(modelSpecs(configSchema.parse({ model: [{ name: "named", source: "/abs/tiny.gguf" }] }))[0].source, { id: "named", kind: "file", path: "/abs/tiny.gguf" });
  assert.throws(() => modelSpecs(configSchema.parse({ model: [{ name: "..", source: "/abs/tiny.gguf" }] })), /cannot be named "\.\."/);
});

// ---- resolveModelPath: local files ------------------------------------------------------

test("resolveModelPath: local file is returned as an absolute path; missing file names the path", async () => {
  const dir = tempCache();
  const file = path.join(dir, "local.gguf");
  fs.writeFileSync(file, "GGUF");
  const rel = path.relative(process.cwd(), file);
  assert.equal(await resolveModelPath({ id: "local", kind: "file", path: rel }), file);

  const missing = path.join(dir, "nope.gguf");
  await assert.rejects(resolveModelPath({ id: "nope", kind: "file", path: missing }), (err: Error) => {
    assert.ok(err.message.includes(missing));
    assert.match(err.message, /not found/);
    return true;
  });
  await assert.rejects(resolveModelPath({ id: "d", kind: "file", path: dir }), /not a regular file/);
});

// ---- resolveModelPath: hub downloads ------------------------------------------------------

test("fresh download writes identical bytes, reports the total, and the next call uses the cache", async () => {
  const { endpoint, seen } = await startServer();
  const cacheDir = tempCache();
  const events: Array<{ received: number; total?: number }> = [];

  const got = await resolveModelPath(SRC, { cacheDir, endpoint, progress: (p) => events.push(p) });
  assert.equal(got, targetIn(cacheDir));
  assert.ok(fs.readFileSync(got).equals(DATA));
  assert.equal(fs.existsSync(`${got}.part`), false);
  assert.match(fs.readFileSync(`${got}.sha256`, "utf8"), new RegExp(`^${SHA}  model\\.gguf\\n$`));
  assert.ok(events.length > 0);
  assert.ok(events.every((e) => e.total === SIZE));
  assert.equal(events.at(-1)?.received, SIZE);
  assert.equal(seen.length, 1);

  const again = await resolveModelPath(SRC, { cacheDir, endpoint });
  assert.equal(again, got);
  assert.equal(seen.length, 1, "cached file must not trigger a request");

  // `plinth models` lists it by the reference that serves it; unfinished downloads are not listed.
  fs.writeFileSync(path.join(cacheDir, "owner", "repo", "main", "half.gguf.part"), "x");
  assert.deepEqual(listCachedModels(cacheDir), [{ ref: "hf:owner/repo/model.gguf", path: got, bytes: SIZE }]);
});

test("interrupted download fails, then resumes with a Range request", async () => {
  const cut = 1_000_000;
  const { endpoint, seen } = await startServer({ dropFirstAfter: cut });
  const cacheDir = tempCache();
  const target = targetIn(cacheDir);

  await assert.rejects(resolveModelPath(SRC, { cacheDir, endpoint }), (err: unknown) => {
    assert.ok(err instanceof ModelDownloadError);
    assert.match(err.message, /run again to resume/);
    assert.ok(!err.message.includes("\n"));
    return true;
  });
  assert.equal(fs.existsSync(target), false);
  // What reached the disk: all `cut` bytes, or fewer on a loaded machine, where fetch's stream drops
  // the chunks it had queued but not yet handed over when the connection breaks. Either way the
  // resume starts at what the .part holds.
  const kept = fs.statSync(`${target}.part`).size;
  assert.ok(kept > 0 && kept <= cut, `kept ${kept} bytes`);

  const events: Array<{ received: number; total?: number }> = [];
  const got = await resolveModelPath(SRC, { cacheDir, endpoint, progress: (p) => events.push(p) });
  assert.equal(seen.length, 2);
  assert.equal(seen[0].range, undefined);
  assert.equal(seen[1].range, `bytes=${kept}-`);
  assert.ok(fs.readFileSync(got).equals(DATA));
  assert.ok(events[0].received > kept, "progress counts the bytes already on disk");
  assert.equal(events.at(-1)?.received, SIZE);
  assert.equal(events.at(-1)?.total, SIZE);
});

test("a complete .part left unverified is finished after a 416", async () => {
  const { endpoint, seen } = await startServer();
  const cacheDir = tempCache();
  const target = targetIn(cacheDir);
  fs.mkdirSync(path.dirname(target), { recursive: true });
  fs.writeFileSync(`${target}.part`, DATA);

  const got = await resolveModelPath(SRC, { cacheDir, endpoint });
  assert.equal(seen[0].range, `bytes=${SIZE}-`);
  assert.ok(fs.readFileSync(got).equals(DATA));
});

test("checksum mismatch deletes the download and leaves no final file", async () => {
  const wrong = "ab".repeat(32);
  const { endpoint } = await startServer({ linkedEtag: wrong });
  const cacheDir = tempCache();
  const target = targetIn(cacheDir);

  await assert.rejects(resolveModelPath(SRC, { cacheDir, endpoint }), (err: unknown) => {
    assert.ok(err instanceof ModelDownloadError);
    assert.match(err.message, /checksum mismatch/);
    assert.ok(err.message.includes(wrong) && err.message.includes(SHA));
    return true;
  });
  assert.equal(fs.existsSync(target), false);
  assert.equal(fs.existsSync(`${target}.part`), false);
  assert.equal(fs.existsSync(`${target}.sha256`), false);
});

test("the sha256 on a redirect response is used to verify the redirected download", async () => {
  const good = await startServer({ redirect: true });
  const cacheDir = tempCache();
  const got = await resolveModelPath(SRC, { cacheDir, endpoint: good.endpoint });
  assert.deepEqual(good.seen.map((r) => r.url), [FILE_PATH, "/cdn/model.gguf"]);
  assert.ok(fs.readFileSync(got).equals(DATA));

  const bad = await startServer({ redirect: true, linkedEtag: "cd".repeat(32) });
  await assert.rejects(resolveModelPath(SRC, { cacheDir: tempCache(), endpoint: bad.endpoint }), /checksum mismatch/);
});

test("HF_TOKEN is sent as a bearer token", async () => {
  const { endpoint, seen } = await startServer();
  const saved = process.env.HF_TOKEN;
  process.env.HF_TOKEN = "hf_test_token";
  try {
    await resolveModelPath(SRC, { cacheDir: tempCache(), endpoint });
  } finally {
    if (saved === undefined) delete process.env.HF_TOKEN;
    else process.env.HF_TOKEN = saved;
  }
  assert.equal(seen[0].authorization, "Bearer hf_test_token");
});

test("404 says the file was not found", async () => {
  const { endpoint } = await startServer();
  const src: ModelSource = { ...SRC, file: "missing.gguf" };
  await assert.rejects(resolveModelPath(src, { cacheDir: tempCache(), endpoint }), (err: unknown) => {
    assert.ok(err instanceof ModelDownloadError);
    assert.equal(err.status, 404);
    assert.match(err.message, /not found/);
    assert.ok(err.message.includes("hf:owner/repo/missing.gguf"));
    return true;
  });
});

test("unreachable endpoint suggests passing a local file", async () => {
  await assert.rejects(
    resolveModelPath(SRC, { cacheDir: tempCache(), endpoint: "http://127.0.0.1:1" }),
    (err: unknown) => {
      assert.ok(err instanceof ModelDownloadError);
      assert.match(err.message, /^cannot download hf:owner\/repo\/model\.gguf: .+No network\?/);
      assert.ok(err.message.includes("--model"));
      assert.ok(!err.message.includes("\n"));
      return true;
    },
  );
});

test("refused connection is reported as such", async () => {
  // Grab a free port and close it again, so nothing listens there.
  const probe = http.createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  await assert.rejects(
    resolveModelPath(SRC, { cacheDir: tempCache(), endpoint: `http://127.0.0.1:${port}` }),
    (err: unknown) => {
      assert.ok(err instanceof ModelDownloadError);
      assert.match(err.message, /connection to 127\.0\.0\.1:\d+ refused\. No network\? Pass a local file instead: --model /);
      return true;
    },
  );
});

test("abort signal stops the download with the abort reason", async () => {
  const { endpoint } = await startServer();
  const ac = new AbortController();
  ac.abort(new Error("stop"));
  await assert.rejects(resolveModelPath(SRC, { cacheDir: tempCache(), endpoint, signal: ac.signal }), /stop/);
});
