import { existsSync } from "node:fs";
import os from "node:os";
import path from "node:path";

export type ModelSource =
  | { id: string; kind: "file"; path: string }
  | { id: string; kind: "hf"; owner: string; repo: string; revision: string; file: string };

export const DEFAULT_MODEL = "hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf";

export const DEFAULT_REVISION = "main";

export class ModelSourceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModelSourceError";
  }
}

const HF_PREFIX = "hf:";
// Hub owner, repo and branch names are restricted to this set; enforcing it here also
// keeps these values safe to use as directory names in the download cache.
const HUB_NAME = /^[A-Za-z0-9_.-]+$/;
const GGUF_EXT = /\.gguf$/i;

/**
 * Parses `[name=]<path | hf:owner/repo[@revision]/path/to/file.gguf>`. With `name` given (a config
 * file's `{name, source}`, the admin API's `name`), `arg` is the source alone: nothing in it is read
 * as a name, and the name is never read as part of a path.
 */
export function parseModelArg(arg: string, name?: string): ModelSource {
  const raw = arg.trim();
  if (raw === "") throw new ModelSourceError("empty --model value; expected a .gguf path or hf:owner/repo/file.gguf");

  const { name: named, spec } = name === undefined ? splitName(raw, arg) : { name: checkName(name.trim(), `${name}=${arg}`), spec: raw };
  if (spec === "") throw new ModelSourceError(`--model "${arg}" names a model but gives no path or hf: reference after "="`);

  if (spec.startsWith(HF_PREFIX)) {
    const ref = parseHfRef(spec.slice(HF_PREFIX.length), arg);
    return { id: named ?? idFromFile(ref.file, arg), kind: "hf", ...ref };
  }

  const filePath = expandHome(spec);
  return { id: named ?? idFromFile(filePath, arg), kind: "file", path: filePath };
}

/** Canonical `hf:` spelling of a source, as a user would type it (revision shown only when not the default). */
export function formatHfRef(src: { owner: string; repo: string; revision: string; file: string }): string {
  const rev = src.revision === DEFAULT_REVISION ? "" : `@${src.revision}`;
  return `${HF_PREFIX}${src.owner}/${src.repo}${rev}/${src.file}`;
}

function splitName(raw: string, arg: string): { name?: string; spec: string } {
  const eq = raw.indexOf("=");
  if (eq < 0) return { spec: raw };
  const prefix = raw.slice(0, eq);
  // Names may hold "/" (`Qwen/Qwen2.5-7B-Instruct=…`, as vLLM's served names do). A "=" belongs to
  // the path when what comes before it reads as a path (absolute, ./ ../ or ~ relative, a Windows
  // separator), sits inside an hf: reference, or when the whole argument is a file that exists.
  // Other paths with "=" stay usable by writing "./".
  // A bare "." or ".." before the "=" is a name (refused below), not a folder: "../x.gguf" has its "/".
  if (/^(?:[/~]|\.{1,2}[/\\])/.test(prefix) || prefix.includes("\\") || prefix.startsWith(HF_PREFIX) || existsSync(expandHome(raw))) return { spec: raw };
  return { name: checkName(prefix.trim(), arg), spec: raw.slice(eq + 1).trim() };
}

/**
 * A model name as given: not empty, no whitespace, and neither "." nor ".." (nor such a segment
 * between its "/"s): clients and proxies fold those out of URL paths (`/v1/models/{name}`,
 * `/api/2.0/plinth/models/{name}`), so such a model could be neither asked for nor unloaded.
 */
function checkName(name: string, arg: string): string {
  if (name === "") throw new ModelSourceError(`--model "${arg}" has an empty name before "="`);
  if (/\s/.test(name)) throw new ModelSourceError(`--model "${arg}": model name "${name}" must not contain whitespace`);
  if (name.split("/").some((part) => part === "." || part === ".."))
    throw new ModelSourceError(`--model "${arg}": a model cannot be named "${name}": "." and ".." (alone or between "/"s) are folded out of URL paths`);
  return name;
}

function parseHfRef(rest: string, arg: string): { owner: string; repo: string; revision: string; file: string } {
  const usage = "expected hf:owner/repo[@revision]/path/to/file.gguf";
  const parts = rest.split("/");
  if (parts.length < 3) {
    throw new ModelSourceError(`--model "${arg}" does not name a file inside the repository; ${usage}`);
  }
  const [owner, repoPart, ...fileParts] = parts;

  let repo = repoPart;
  let revision = DEFAULT_REVISION;
  const at = repoPart.indexOf("@");
  if (at >= 0) {
    repo = repoPart.slice(0, at);
    revision = repoPart.slice(at + 1);
    if (revision === "") throw new ModelSourceError(`--model "${arg}" has an empty revision after "@"; ${usage}`);
  }

  for (const [what, value] of [["owner", owner], ["repository", repo], ["revision", revision]] as const) {
    if (value === "") throw new ModelSourceError(`--model "${arg}" has an empty ${what}; ${usage}`);
    if (!HUB_NAME.test(value) || value === "." || value === "..") {
      throw new ModelSourceError(`--model "${arg}" has an invalid ${what} "${value}"; ${usage}`);
    }
  }

  for (const seg of fileParts) {
    if (seg === "" || seg === "." || seg === ".." || seg.includes("\\")) {
      throw new ModelSourceError(`--model "${arg}" has an invalid file path "${fileParts.join("/")}"; ${usage}`);
    }
  }
  const file = fileParts.join("/");
  if (!GGUF_EXT.test(file)) {
    throw new ModelSourceError(`--model "${arg}": "${file}" is not a .gguf file; ${usage}`);
  }
  return { owner, repo, revision, file };
}

function idFromFile(filePath: string, arg: string): string {
  const base = filePath.split(/[\\/]/).pop() ?? "";
  const id = base.replace(GGUF_EXT, "");
  if (id === "" || id === "." || id === "..") throw new ModelSourceError(`--model "${arg}": cannot derive a model name from "${filePath}"; use name=<path>`);
  return id;
}

// Shells do not expand "~" after "name=", so do it here for the common forms.
function expandHome(p: string): string {
  if (p === "~") return os.homedir();
  if (p.startsWith("~/") || p.startsWith("~\\")) return path.join(os.homedir(), p.slice(2));
  return p;
}
