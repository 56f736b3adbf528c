import { accessSync, closeSync, constants, mkdirSync, openSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import Database from "better-sqlite3";
import { ConfigError } from "./load.ts";

const HINT = "pick another with --data-dir or PLINTH_DATA_DIR";

/**
 * Makes sure the data directory exists (created 0700 when new) and that this user may write in it,
 * before the store opens it. Without this a file in its place surfaced as a bare
 * "EEXIST: file already exists, mkdir …" and a directory of another user as "EACCES: …", neither
 * saying that the data directory was the problem or what to do about it.
 */
export function prepareDataDir(dir: string): void {
  const what = `the data directory ${dir}`;
  let existing;
  try {
    existing = statSync(dir, { throwIfNoEntry: false });
  } catch (err) {
    throw new ConfigError(`cannot use ${what}: ${reason(err)}; ${HINT}`);
  }
  if (existing && !existing.isDirectory()) throw new ConfigError(`${what} is not a directory (a file is in its place); ${HINT}`);
  if (!existing) {
    try {
      makeDirs(dir);
    } catch (err) {
      throw new ConfigError(`cannot create ${what}: ${reason(err)}; ${HINT}`);
    }
  }
  try {
    accessSync(dir, constants.R_OK | constants.W_OK | constants.X_OK);
  } catch (err) {
    throw new ConfigError(`cannot use ${what}: ${reason(err)}; ${HINT}`);
  }
}

/**
 * `mkdir -p`, one level at a time. Node's own recursive mkdir never returns where a directory cannot
 * be made for a reason other than a missing parent it could make (under /proc it asks again for
 * ever); one level at a time, the first mkdir that fails says why.
 */
function makeDirs(dir: string): void {
  const parent = dirname(dir);
  if (parent !== dir && statSync(parent, { throwIfNoEntry: false }) === undefined) makeDirs(parent);
  mkdirSync(dir, { mode: 0o700 });
}

/**
 * Opens a file of the data directory (the store's `plinth.db`) through `open`, turning what SQLite
 * or the file system says about a file that cannot serve into one line that names the file and what
 * to do. Without this a directory in its place read "EISDIR: illegal operation on a directory", and
 * another program's file "file is not a database".
 */
export function openDataFile<T>(dir: string, file: string, open: () => T): T {
  try {
    return open();
  } catch (err) {
    const code = (err as { code?: string }).code;
    const what = `the store ${join(dir, file)}`;
    switch (code) {
      case "EISDIR":
        throw new ConfigError(`cannot open ${what}: it is a directory; move it away or ${HINT}`);
      case "SQLITE_NOTADB":
        throw new ConfigError(`cannot open ${what}: it is not an SQLite database (another program's file?); move it away or ${HINT}`);
      case "SQLITE_CORRUPT":
        throw new ConfigError(`cannot open ${what}: the database is damaged; restore it from a backup, or move it away to start empty`);
      case "SQLITE_BUSY":
      case "SQLITE_LOCKED":
        throw new ConfigError(`cannot open ${what}: another process holds it locked (another Plinth on the same data directory?)`);
      case "SQLITE_READONLY":
      case "SQLITE_CANTOPEN":
      case "SQLITE_PERM":
      case "SQLITE_AUTH":
      case "EACCES":
      case "EPERM":
        throw new ConfigError(`cannot open ${what}: this user may not read and write it; ${HINT}`);
      default:
        throw err;
    }
  }
}

/** The cause in words, for the codes a path can fail with; Node's own message for the rest. */
function reason(err: unknown): string {
  switch ((err as NodeJS.ErrnoException).code) {
    case "EACCES":
    case "EPERM":
      return "permission denied (this user may not write there)";
    case "EEXIST":
    case "ENOTDIR":
      return "a part of its path is a file, not a directory";
    case "EROFS":
      return "the file system is read-only";
    default:
      return (err as Error).message;
  }
}

/** The file whose lock says a server has the data directory. */
const LOCK_FILE = "server.lock";

/**
 * Takes the data directory for this server, or refuses: two servers on one directory each take the
 * other's running responses for ones a crash left behind (a server marks those failed when it
 * starts), so the second start must not go ahead. The lock is SQLite's own on a small file of its
 * own, held for as long as the returned function has not been called (or the process lives: the
 * operating system drops it with the process, so a killed server leaves nothing to clean up). The
 * store file itself stays open to `plinth keys` and other readers.
 */
export function lockDataDir(dir: string): () => void {
  const path = join(dir, LOCK_FILE);
  // Private like the store and the key file (SQLite would create it 0644 under the usual umask).
  try {
    closeSync(openSync(path, "a", 0o600));
  } catch {
    // Refused below, by SQLite, with the reason.
  }
  const db = new Database(path, { timeout: 0 });
  try {
    // In exclusive locking mode a connection keeps the lock of its first write until it closes.
    db.pragma("locking_mode = EXCLUSIVE");
    db.exec("BEGIN EXCLUSIVE; CREATE TABLE IF NOT EXISTS holder (pid INTEGER); DELETE FROM holder; INSERT INTO holder VALUES (" + process.pid + "); COMMIT;");
  } catch (err) {
    db.close();
    const code = (err as { code?: string }).code;
    if (code === "SQLITE_BUSY" || code === "SQLITE_LOCKED")
      throw new ConfigError(`the data directory ${dir} is in use by another running Plinth server (one server per data directory); stop it, or ${HINT}`);
    throw new ConfigError(`cannot lock the data directory ${dir} (${LOCK_FILE}): ${reason(err)}; ${HINT}`);
  }
  return () => db.close();
}
