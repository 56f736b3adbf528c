import { parseArgs } from "node:util";
import type { z } from "zod";
import { onlyUsed } from "./args.ts";
import { openDataFile, prepareDataDir } from "../config/data-dir.ts";
import { ConfigError, loadConfig } from "../config/load.ts";
import { ApiError } from "../core/errors.ts";
import { DB_FILE, openSqliteStore } from "../store/sqlite-store.ts";
import { TenancyStore } from "../store/tenancy-store.ts";
import { keyModels, keyName, parseTime, usageQuery, usageReport } from "../tenancy/admin.ts";
import { createManagedKey, keyToJson } from "../tenancy/keys.ts";
import { KEYS_USAGE } from "./keys-usage.ts";


/** Opens the store of the configured data directory (applying its migrations), runs `use`, closes it. */
async function withStore<T>(flags: Record<string, unknown>, use: (store: TenancyStore) => T): Promise<T> {
  const config = loadConfig({ "data-dir": flags["data-dir"], config: flags.config });
  prepareDataDir(config["data-dir"]);
  const main = openDataFile(config["data-dir"], DB_FILE, () => openSqliteStore({ dataDir: config["data-dir"], ttlSeconds: 0 }));
  const store = new TenancyStore(config["data-dir"]);
  try {
    return use(store);
  } finally {
    store.close();
    await main.close();
  }
}

const positiveInt = (value: string | undefined, flag: string): number | null => {
  if (value === undefined) return null;
  // Past 2^53 the number stored is not the one given (and SQLite would keep it as a float).
  if (!/^\d+$/.test(value) || Number(value) < 1 || !Number.isSafeInteger(Number(value)))
    throw new ConfigError(`${flag} must be a whole number from 1 to ${Number.MAX_SAFE_INTEGER}, got '${value}'`);
  return Number(value);
};

/** A value checked by the admin API's own rule for it: the CLI writes to the same store. */
function checked<T>(schema: z.ZodType<T>, value: unknown, flag: string): T {
  const result = schema.safeParse(value);
  if (!result.success) throw new ConfigError(`${flag}: ${result.error.issues[0].message}`);
  return result.data;
}

/** Turns an admin-API error about a CLI value into a one-line message. */
function cliTime(value: string, flag: string): number {
  try {
    return parseTime(value, flag);
  } catch (err) {
    if (err instanceof ApiError) throw new ConfigError(`${flag}: expected a date (YYYY-MM-DD), an ISO 8601 time or Unix seconds, got '${value}'`);
    throw err;
  }
}

/** What each keys command reads: its options, and how many words follow its name. */
const KEYS_TAKES = {
  create: { options: ["name", "models", "rpm", "tpm", "max-concurrency", "budget-tokens", "expires", "json", "data-dir"], words: 0 },
  list: { options: ["json", "data-dir"], words: 0 },
  revoke: { options: ["data-dir"], words: 1 },
} as const;

/** `plinth keys …`. Returns the exit code. */
export async function keysCommand(argv: string[], out: NodeJS.WritableStream = process.stdout): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      name: { type: "string" },
      models: { type: "string" },
      rpm: { type: "string" },
      tpm: { type: "string" },
      "max-concurrency": { type: "string" },
      "budget-tokens": { type: "string" },
      expires: { type: "string" },
      json: { type: "boolean" },
      "data-dir": { type: "string" },
      config: { type: "string" },
    },
  });
  const [sub, ...rest] = positionals;
  if (sub === "create" || sub === "list" || sub === "revoke") onlyUsed(`keys ${sub}`, values, rest, KEYS_TAKES[sub], `\n\n${KEYS_USAGE}`);
  if (sub === "create") {
    if (!values.name) throw new ConfigError(`keys create needs --name\n\n${KEYS_USAGE}`);
    const settings = {
      name: checked(keyName, values.name, "--name"),
      models: values.models === undefined ? null : values.models.split(",").map((m) => m.trim()).filter(Boolean),
      rpm: positiveInt(values.rpm, "--rpm"),
      tpm: positiveInt(values.tpm, "--tpm"),
      maxConcurrency: positiveInt(values["max-concurrency"], "--max-concurrency"),
      budgetTokens: positiveInt(values["budget-tokens"], "--budget-tokens"),
      expiresAt: values.expires === undefined ? null : cliTime(values.expires, "--expires"),
    };
    // As the admin API refuses it: a bare date is that day's 00:00 UTC, so today would be born expired.
    if (settings.expiresAt !== null && settings.expiresAt <= Date.now()) {
      throw new ConfigError(`--expires: '${values.expires}' is already past; a key must expire in the future (a date means its 00:00 UTC)`);
    }
    if (settings.models !== null && settings.models.length === 0) throw new ConfigError("--models needs at least one model name");
    if (settings.models !== null) checked(keyModels, settings.models, "--models");
    const { key, record } = await withStore(values, (store) => createManagedKey(store, settings));
    if (values.json) out.write(`${JSON.stringify({ ...keyToJson(record), key })}\n`);
    else {
      out.write(`created ${record.id} (${record.name})\n`);
      out.write(`key: ${key}\n`);
      out.write("This is the only time the key is shown; Plinth keeps only its hash.\n");
    }
    return 0;
  }
  if (sub === "list") {
    const keys = await withStore(values, (store) => store.listKeys().map((r) => keyToJson(r)));
    if (values.json) {
      out.write(`${JSON.stringify(keys)}\n`);
      return 0;
    }
    if (keys.length === 0) {
      out.write("no API keys (plinth keys create --name NAME)\n");
      return 0;
    }
    const dash = (v: unknown) => (v === null || v === undefined ? "-" : String(v));
    const day = (s: number | null) => (s === null ? "-" : new Date(s * 1000).toISOString().slice(0, 10));
    out.write(
      table(
        ["id", "name", "prefix", "state", "created", "expires", "models", "rpm", "tpm", "concurrency", "budget", "used"],
        keys.map((k) => [
          k.id, k.name, `${k.prefix}…`, k.state, day(k.created_at), day(k.expires_at), k.models ? k.models.join(",") : "all",
          dash(k.rpm), dash(k.tpm), dash(k.max_concurrency), dash(k.budget_tokens), String(k.used_tokens),
        ]),
        { 1: NAME_WIDTH, 6: MODELS_WIDTH },
      ),
    );
    return 0;
  }
  if (sub === "revoke") {
    if (rest.length !== 1) throw new ConfigError(`keys revoke needs one key id\n\n${KEYS_USAGE}`);
    const found = await withStore(values, (store) => store.revokeKey(rest[0], Date.now()));
    if (!found) throw new ConfigError(`no API key with id '${rest[0]}'`);
    out.write(`revoked ${rest[0]}\n`);
    return 0;
  }
  throw new ConfigError(`unknown keys command '${sub ?? ""}'\n\n${KEYS_USAGE}`);
}

/** `plinth usage`: the ledger's totals as a table. */
export async function usageCommand(argv: string[], out: NodeJS.WritableStream = process.stdout): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      from: { type: "string" },
      to: { type: "string" },
      "group-by": { type: "string" },
      json: { type: "boolean" },
      "data-dir": { type: "string" },
      config: { type: "string" },
    },
  });
  onlyUsed("usage", values, positionals, { options: Object.keys(values), words: 0 }, `\n\n${KEYS_USAGE}`);
  if (values.from !== undefined) cliTime(values.from, "--from");
  if (values.to !== undefined) cliTime(values.to, "--to");
  const q = usageQuery.safeParse({ from: values.from, to: values.to, group_by: values["group-by"] });
  if (!q.success) throw new ConfigError(`--group-by must be key, model or day, got '${values["group-by"]}'`);
  const report = await withStore(values, (store) => usageReport(store, q.data));
  if (values.json) {
    out.write(`${JSON.stringify(report)}\n`);
    return 0;
  }
  const g = report.group_by;
  out.write(
    table(
      [g, "requests", "errors", "prompt", "cached", "completion", "reasoning", "total"],
      report.data.map((r) => [
        String(r[g] ?? "(none)"), String(r.requests), String(r.errors), String(r.prompt_tokens), String(r.cached_tokens),
        String(r.completion_tokens), String(r.reasoning_tokens), String(r.total_tokens),
      ]),
    ),
  );
  return 0;
}

/**
 * Columns padded to their widest cell. A column with a most width (`caps`, by index) has longer
 * cells cut to it with an ellipsis: one 200-character key name padded every row of the table to
 * its length. `--json` keeps every value whole.
 */
function table(head: string[], rows: string[][], caps: Record<number, number> = {}): string {
  const cells = rows.map((r) => r.map((c, i) => (caps[i] === undefined ? c : cut(c, caps[i]))));
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((r) => [...r[i]].length)));
  const line = (row: string[]) => row.map((c, i) => c + " ".repeat(widths[i] - [...c].length)).join("  ").trimEnd();
  return `${[line(head), line(widths.map((w) => "-".repeat(w))), ...cells.map(line)].join("\n")}\n`;
}

/** `text` in at most `max` characters (code points, so no emoji is split), the last an ellipsis when cut. */
function cut(text: string, max: number): string {
  const chars = [...text];
  return chars.length <= max ? text : `${chars.slice(0, max - 1).join("")}…`;
}

/** Widths of `plinth keys list`'s free-text columns: a name, and the models (a list of any length). */
const NAME_WIDTH = 32;
const MODELS_WIDTH = 40;
