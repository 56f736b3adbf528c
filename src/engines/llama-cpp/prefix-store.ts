import { createHash } from "node:crypto";
import {
  chmodSync,
  closeSync,
  existsSync,
  fchmodSync,
  lstatSync,
  mkdtempSync,
  openSync,
  readdirSync,
  rmSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LlamaContextSequence, Token } from "node-llama-cpp";

export interface SavedPrefix {
  namespace: string;
  tokens: Token[];
  path: string;
  bytes: number;
  lastUsed: number;
}

export interface PrefixStoreOptions {
  /** Where the per-store folders go; /dev/shm where it exists, else the temp directory. */
  baseDir?: string;
  /** Most states kept, whatever their bytes (default MAX_ENTRIES). */
  maxEntries?: number;
}

/**
 * Most states one store keeps. Every request looks through them all for its longest shared prefix,
 * and each keeps its tokens on the JavaScript heap: a small model's states are small, so a byte
 * budget alone let a soak reach 19,000 entries (about 70 MB of heap, and a scan of all of them per
 * request). A real model's states are megabytes, so its byte budget binds long before this.
 */
export const MAX_ENTRIES = 1024;

/**
 * Evaluated prompt states saved outside the sequences, so a prefix survives its sequence being
 * reused for another prompt. node-llama-cpp can only copy sequence state through files, so they live
 * on a RAM-backed directory (/dev/shm where it exists), bounded by a byte budget with least-recently
 * used eviction. Entries belong to one namespace and are only ever offered to that namespace.
 *
 * The files hold other clients' prompts and are loaded back into the model, so each store keeps
 * them in a folder of its own that only this user can enter (0700, files 0600), created under a
 * fresh unpredictable name so nobody can plant one in advance. The folder goes when the store is
 * disposed or the process exits; folders left by processes that died without exiting (a crash, a
 * SIGKILL) are swept when the next store starts.
 */
export class PrefixStore {
  private readonly entries = new Map<string, SavedPrefix>();
  /**
   * Keys being written now. Requests with the same prompt finish evaluating it together (eight
   * identical chats at once), and without this each wrote the same file at the same time and the
   * budget counted it once per writer.
   */
  private readonly saving = new Set<string>();
  private readonly dirPrefix: string;
  private dir: string | undefined;
  private disposed = false;
  private used = 0;
  private clock = 0;
  private evicted = 0;
  private readonly maxEntries: number;

  constructor(
    private readonly budgetBytes: number,
    private readonly minTokens: number,
    label: string,
    options: PrefixStoreOptions = {},
  ) {
    this.maxEntries = options.maxEntries ?? MAX_ENTRIES;
    const base = options.baseDir ?? (existsSync("/dev/shm") ? "/dev/shm" : tmpdir());
    this.dirPrefix = join(base, `plinth-${process.pid}-${safeFileLabel(label)}-`);
    sweepStaleStoreDirs(base);
  }

  /** The folder holding this store's files, once the first save has created it. */
  get directory(): string | undefined {
    return this.dir;
  }

  get enabled(): boolean {
    return this.budgetBytes > 0;
  }

  get bytesUsed(): number {
    return this.used;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Saved states dropped to stay within the budget, since the store was made. */
  get evictions(): number {
    return this.evicted;
  }

  /** Drops an entry whose file could not be read back (removed from the RAM disk, damaged). */
  forget(entry: SavedPrefix): void {
    for (const [key, e] of this.entries) {
      if (e !== entry) continue;
      this.entries.delete(key);
      this.used -= e.bytes;
      rmSync(e.path, { force: true });
      return;
    }
  }

  /** The saved state sharing the longest prefix with `prompt` in this namespace. */
  best(namespace: string, prompt: readonly Token[]): { entry: SavedPrefix; match: number } | undefined {
    let best: { entry: SavedPrefix; match: number } | undefined;
    for (const entry of this.entries.values()) {
      if (entry.namespace !== namespace) continue;
      const match = commonPrefix(entry.tokens, prompt);
      if (match > (best?.match ?? 0)) best = { entry, match };
    }
    if (best) best.entry.lastUsed = ++this.clock;
    return best;
  }

  /** Saves the sequence's current state (an evaluated prompt) unless it is too short or already kept. */
  async save(namespace: string, sequence: LlamaContextSequence): Promise<void> {
    const tokens = sequence.contextTokens;
    if (!this.enabled || this.disposed || tokens.length < this.minTokens) return;
    const key = createHash("sha256").update(namespace).update("\0").update(Uint32Array.from(tokens)).digest("hex").slice(0, 32);
    const existing = this.entries.get(key);
    if (existing) {
      existing.lastUsed = ++this.clock;
      return;
    }
    if (this.saving.has(key)) return;
    this.saving.add(key);
    let path: string | undefined;
    let fileSize: number;
    try {
      path = join(this.ensureDir(), `${key}.state`);
      // The native writer opens the file with fopen, which keeps the mode of a file that is
      // already there, so create it private first, then make sure of the mode once written.
      createPrivateFile(path);
      ({ fileSize } = await sequence.saveStateToFile(path));
      chmodSync(path, 0o600);
    } catch {
      // A full or missing RAM disk (containers often give /dev/shm 64 MiB) costs cache hits, never
      // the request: the state is simply not kept.
      if (path) rmSync(path, { force: true });
      return;
    } finally {
      this.saving.delete(key);
    }
    if (this.disposed || fileSize > this.budgetBytes) {
      rmSync(path, { force: true });
      return;
    }
    this.entries.set(key, { namespace, tokens: tokens.slice(), path, bytes: fileSize, lastUsed: ++this.clock });
    this.used += fileSize;
    this.evictToBudget();
  }

  dispose(): void {
    this.disposed = true;
    this.entries.clear();
    this.used = 0;
    if (this.dir) {
      removeOnExit.delete(this.dir);
      rmSync(this.dir, { recursive: true, force: true });
      this.dir = undefined;
    }
    syncExitHandler();
  }

  private ensureDir(): string {
    if (this.dir) return this.dir;
    // mkdtemp makes a new folder (never reuses one that is there) with mode 0700; the chmod
    // states it rather than trusting the platform and umask.
    const dir = mkdtempSync(this.dirPrefix);
    this.dir = dir;
    removeOnExit.add(dir);
    syncExitHandler();
    chmodSync(dir, 0o700);
    return dir;
  }

  private evictToBudget(): void {
    while ((this.used > this.budgetBytes || this.entries.size > this.maxEntries) && this.entries.size > 0) {
      let oldestKey = "";
      let oldest = Infinity;
      for (const [key, e] of this.entries) {
        if (e.lastUsed < oldest) {
          oldest = e.lastUsed;
          oldestKey = key;
        }
      }
      const victim = this.entries.get(oldestKey)!;
      this.entries.delete(oldestKey);
      this.used -= victim.bytes;
      this.evicted++;
      rmSync(victim.path, { force: true });
    }
  }
}

export function commonPrefix(a: readonly Token[], b: readonly Token[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

// ---------------------------------------------------------------------------------------
// Folder names and clean-up

const MAX_LABEL_CHARS = 64;

/**
 * A file-name-safe rendering of a model id: only [A-Za-z0-9._-], at most 64 characters, never
 * "." or "..". Lossy, so a short hash of the exact id keeps two ids that render alike apart.
 */
export function safeFileLabel(label: string): string {
  const readable = label.replace(/[^A-Za-z0-9._-]+/g, "_").replace(/^[.-]+/, "").slice(0, MAX_LABEL_CHARS);
  const tag = createHash("sha256").update(label).digest("hex").slice(0, 8);
  return readable ? `${readable}-${tag}` : tag;
}

function createPrivateFile(path: string): void {
  const fd = openSync(path, "w", 0o600);
  try {
    fchmodSync(fd, 0o600);
  } finally {
    closeSync(fd);
  }
}

const STORE_DIR = /^plinth-(\d+)-/;

/**
 * Removes the store folders (plinth-<pid>-*) under `base` whose process is gone. Only folders
 * this user owns are touched; this process's own are left alone.
 */
export function sweepStaleStoreDirs(base: string): void {
  let names: string[];
  try {
    names = readdirSync(base);
  } catch {
    return;
  }
  const uid = process.getuid?.();
  for (const name of names) {
    const m = STORE_DIR.exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid || processAlive(pid)) continue;
    const dir = join(base, name);
    try {
      const st = lstatSync(dir);
      if (!st.isDirectory() || (uid !== undefined && st.uid !== uid)) continue;
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // Gone already, or not ours to remove.
    }
  }
}

/** Whether a process with this id exists; a signal we may not send (EPERM) still means it does. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // Only "no such process" counts as dead; anything unexpected keeps the folder.
    return (err as NodeJS.ErrnoException).code !== "ESRCH";
  }
}

// One 'exit' listener for all stores, present only while some store has a folder, so creating
// and disposing stores never accumulates listeners.
const removeOnExit = new Set<string>();
let exitHandlerInstalled = false;

function removeFoldersOnExit(): void {
  for (const dir of removeOnExit) {
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // Exiting anyway; nothing better to do.
    }
  }
  removeOnExit.clear();
}

function syncExitHandler(): void {
  if (removeOnExit.size > 0 && !exitHandlerInstalled) {
    process.on("exit", removeFoldersOnExit);
    exitHandlerInstalled = true;
  } else if (removeOnExit.size === 0 && exitHandlerInstalled) {
    process.off("exit", removeFoldersOnExit);
    exitHandlerInstalled = false;
  }
}
