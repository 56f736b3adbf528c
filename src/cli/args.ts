import { ConfigError } from "../config/load.ts";

/** What a command reads: the options it acts on, and how many words may follow its name. */
export interface Takes {
  options: readonly string[];
  words: number;
}

/**
 * Refuses options a command does not read and words it does not take: `keys list --rpm 5`,
 * `keys list extra` or `serve extra` would otherwise run as if they were not there, and the user
 * would believe them applied. --config (and --help, answered before) are read by every command.
 * `more` follows the message: the usage, or where to find it.
 */
export function onlyUsed(command: string, values: Record<string, unknown>, words: string[], takes: Takes, more: string): void {
  const unused = Object.keys(values).filter((o) => values[o] !== undefined && o !== "config" && o !== "help" && !takes.options.includes(o));
  if (unused.length > 0) throw new ConfigError(`${command} does not take --${unused[0]}${more}`);
  if (words.length > takes.words) {
    const allowed = takes.words === 0 ? "no arguments" : `${takes.words} argument${takes.words === 1 ? "" : "s"}`;
    // `--log-bodies off`: a flag that is on by its presence leaves its value behind as a stray word.
    const hint = /^(true|false|on|off|1|0)$/i.test(words[takes.words]) ? " (--log-bodies, --no-auth and --no-ui take no value)" : "";
    throw new ConfigError(`${command} takes ${allowed}, got '${words[takes.words]}'${hint}${more}`);
  }
}
