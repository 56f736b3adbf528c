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
    throw storeFileError(dir, file, err);
  }
}

/**
 * What a failure of the store file at `dir/file` says to the operator: one line naming the file
 * and what to do, as a ConfigError; any other error as it is. Used for opening the store and for
 * what reads it before the server serves (a damaged page found by the first query names the file).
 * `sqliteOnly`: file-system codes (EISDIR, EACCES) are left alone, for a step that touches other
 * files too.
 */
export function storeFileError(dir: string, file: string, err: unknown, sqliteOnly = false): unknown {
  const code = (err as { code?: string }).code;
  if (typeof code !== "string" || (sqliteOnly && !code.startsWith("SQLITE_"))) return err;
  const what = `the store ${join(dir, file)}`;
  // SQLite's extended codes (SQLITE_IOERR_WRITE, SQLITE_READONLY_DBMOVED) by their primary code.
  const primary = code.startsWith("SQLITE_") ? code.split("_").slice(0, 2).join("_") : code;
  switch (primary) {
    case "EISDIR":
      return new ConfigError(`cannot open ${what}: it is a directory; move it away or ${HINT}`);
    case "SQLITE_NOTADB":
      return new ConfigError(`cannot open ${what}: it is not an SQLite database (another program's file?); move it away or ${HINT}`);
    case "SQLITE_CORRUPT":
      return new ConfigError(`cannot open ${what}: the database is damaged (${(err as Error).message}); restore it from a backup, or move it away to start empty`);
    case "SQLITE_FULL":
      return new ConfigError(`cannot write ${what}: the disk is full; free some space on it, or ${HINT}`);
    case "SQLITE_IOERR":
      return new ConfigError(`cannot use ${what}: the disk reported an I/O error (${(err as Error).message}); check the disk, or ${HINT}`);
    case "SQLITE_BUSY":
    case "SQLITE_LOCKED":
      return new ConfigError(`cannot open ${what}: another process holds it locked (another Plinth on the same data directory?)`);
    case "SQLITE_READONLY":
    case "SQLITE_CANTOPEN":
    case "SQLITE_PERM":
    case "SQLITE_AUTH":
    case "EACCES":
    case "EPERM":
      return new ConfigError(`cannot open ${what}: this user may not read and write it; ${HINT}`);
    default:
      return err;
  }
}

/**
 * Reads the server's secret key file through `load`, turning a file that cannot be read into one
 * line naming it and what to do (a directory in its place said only "EISDIR", an unreadable file
 * a bare "EACCES"). The key seals reasoning handed to clients, so the advice never starts with
 * deleting a key that can be read.
 */
export function openSecretKeyFile<T>(dir: string, file: string, load: () => T): T {
  try {
    return load();
  } catch (err) {
    const path = join(dir, file);
    switch ((err as NodeJS.ErrnoException).code) {
      case "EISDIR":
        throw new ConfigError(`cannot read the secret key ${path}: it is a directory; move it away (a new key is then made) or ${HINT}`);
      case "EACCES":
      case "EPERM":
        throw new ConfigError(`cannot read the secret key ${path}: permission denied; let the server's user read and write it (chmod 600, owned by that user) or ${HINT}`);
      case "EROFS":
      case "ENOSPC":
        throw new ConfigError(`cannot create the secret key ${path}: ${reason(err)}; ${HINT}`);
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
    case "ENOSPC":
      return "the disk is full";
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
  // A directory in its place would reach SQLite as "unable to open database file".
  if (statSync(path, { throwIfNoEntry: false })?.isDirectory())
    throw new ConfigError(`cannot lock the data directory ${dir}: its lock file ${path} is a directory; remove it (the server makes the file itself) or ${HINT}`);
  // Private like the store and the key file (SQLite would create it 0644 under the usual umask).
  try {
    closeSync(openSync(path, "a", 0o600));
  } catch {
    // Refused below, by SQLite, with the reason.
  }
  let db: Database.Database | undefined;
  try {
    db = new Database(path, { timeout: 0 });
    // In exclusive locking mode a connection keeps the lock of its first write until it closes.
    db.pragma("locking_mode = EXCLUSIVE");
    db.exec("BEGIN EXCLUSIVE; CREATE TABLE IF NOT EXISTS holder (pid INTEGER); DELETE FROM holder; INSERT INTO holder VALUES (" + process.pid + "); COMMIT;");
  } catch (err) {
    db?.close();
    throw lockError(dir, path, err);
  }
  const held = db;
  return () => held.close();
}

/** Why the lock could not be taken, in one line that says what to do about it. */
function lockError(dir: string, path: string, err: unknown): ConfigError {
  const code = (err as { code?: string }).code ?? "";
  if (code === "SQLITE_BUSY" || code === "SQLITE_LOCKED")
    return new ConfigError(`the data directory ${dir} is in use by another running Plinth server (one server per data directory); stop it, or ${HINT}`);
  // The file holds nothing but the lock (no server has it now, or SQLite would have said BUSY): one
  // that is not a lock database was left by something else, and only needs to go.
  if (code.startsWith("SQLITE_NOTADB") || code.startsWith("SQLITE_CORRUPT"))
    return new ConfigError(`cannot lock the data directory ${dir}: its lock file ${path} is not one Plinth made (stale or damaged); delete it (the server makes a new one) and start again`);
  if (code.startsWith("SQLITE_FULL") || code === "ENOSPC")
    return new ConfigError(`cannot lock the data directory ${dir}: the disk is full (its lock file ${path} cannot be written); free some space on it, or ${HINT}`);
  if (code.startsWith("SQLITE_READONLY") || code.startsWith("SQLITE_CANTOPEN") || code === "EACCES" || code === "EPERM")
    return new ConfigError(`cannot lock the data directory ${dir}: this user may not read and write its lock file ${path}; fix its owner or permissions, delete it, or ${HINT}`);
  return new ConfigError(`cannot lock the data directory ${dir} (${LOCK_FILE}): ${reason(err)}; ${HINT}`);
}
