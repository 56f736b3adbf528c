import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { formatPath } from "../core/field-path.ts";
import { configSchema, NUMERIC_KEYS, type PlinthConfig } from "./schema.ts";

export class ConfigError extends Error {}

type Raw = Record<string, unknown>;

/**
 * Merges defaults < config file < PLINTH_* environment < command-line flags. Every source uses the
 * same key names (the flag names without dashes in front).
 */
export function loadConfig(flags: Raw, env: NodeJS.ProcessEnv = process.env): PlinthConfig {
  const file = typeof flags.config === "string" ? flags.config : env.PLINTH_CONFIG;
  const merged: Raw = { ...(file ? readConfigFile(file) : {}), ...fromEnv(env), ...withoutUndefined(flags) };
  delete merged.config;
  for (const key of NUMERIC_KEYS) {
    const v = merged[key];
    if (typeof v === "string" && v.trim() !== "") merged[key] = Number(v);
  }
  if (typeof merged.model === "string") merged.model = [merged.model];
  if (typeof merged.upstream === "string") merged.upstream = [merged.upstream];
  const parsed = configSchema.safeParse(merged);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ConfigError(`invalid setting '${formatPath(issue.path)}': ${issue.message}`);
  }
  return parsed.data;
}

function readConfigFile(path: string): Raw {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(`cannot read config file ${path}: ${(err as Error).message}`);
  }
  let data: unknown;
  try {
    data = parseYaml(text) ?? {};
  } catch (err) {
    // The parser's message says where in the file, not which file: name it, or the user is left guessing.
    throw new ConfigError(`config file ${path} is not valid YAML: ${(err as Error).message.trim()}`);
  }
  if (typeof data !== "object" || data === null || Array.isArray(data)) throw new ConfigError(`config file ${path} must hold a mapping of settings`);
  // A misspelt key (`prot: 9000`) would otherwise leave its setting at the default without a word.
  for (const key of Object.keys(data)) {
    if (key in configSchema.shape) continue;
    const hint = key === "no-ui" ? " (write 'ui: false')" : "";
    throw new ConfigError(`config file ${path}: unknown setting '${key}'${hint}`);
  }
  return data as Raw;
}

/**
 * PLINTH_CTX_SIZE → ctx-size. PLINTH_MODEL may list several models separated by commas,
 * PLINTH_UPSTREAM several upstreams separated by semicolons.
 */
function fromEnv(env: NodeJS.ProcessEnv): Raw {
  const out: Raw = {};
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith("PLINTH_") || value === undefined || name === "PLINTH_CONFIG") continue;
    const key = name.slice("PLINTH_".length).toLowerCase().replaceAll("_", "-");
    if (!(key in configSchema.shape)) continue;
    // Upstreams list their replicas with commas, so several upstreams are separated by semicolons.
    const separator = key === "model" ? "," : key === "upstream" ? ";" : undefined;
    out[key] = separator ? value.split(separator).map((s) => s.trim()).filter(Boolean) : value;
  }
  return out;
}

function withoutUndefined(o: Raw): Raw {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}
