// The server's secret key, and authenticated encryption with it (for the Responses API's
// `reasoning.encrypted_content`: reasoning handed to a client with `store: false`, which it sends
// back in its next input; only this server can read it, and any change to it is detected).

import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { chmodSync, closeSync, fsyncSync, linkSync, mkdirSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";

export const SECRET_KEY_FILE = "secret.key";
export const SECRET_KEY_BYTES = 32;

const IV_BYTES = 12;
const TAG_BYTES = 16;
/** Sealed text starts with this; a later format gets a new prefix, and old text stays readable. */
export const SEALED_PREFIX = "plinth-v1:";

/** Sealed text that cannot be opened: altered, cut, sealed with another key or for another context. */
export class SealedTextError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SealedTextError";
  }
}

function readKey(path: string): Buffer {
  const key = readFileSync(path);
  if (key.length !== SECRET_KEY_BYTES) {
    throw new Error(`${path} holds ${key.length} bytes, not a ${SECRET_KEY_BYTES}-byte key; remove it to have a new key made (text sealed with the old one can then no longer be opened)`);
  }
  return key;
}

/**
 * The 32-byte key in `<dataDir>/secret.key`, made on first use from crypto-random bytes.
 *
 * The new key is written to a private temporary file (mode 0600, set explicitly so the umask
 * cannot widen it), flushed to disk, then put in place atomically. The atomic step is link(2),
 * which unlike rename(2) never replaces an existing file: when two processes race, the first link
 * wins, the loser gets EEXIST and reads the winner's key, so both use one key. (Where the file
 * system cannot hard-link, rename(2) stands in and the key is read back from the file after it.)
 */
export function loadOrCreateSecretKey(dataDir: string): Buffer {
  const created = mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  if (created !== undefined) chmodSync(dataDir, 0o700);
  const path = join(dataDir, SECRET_KEY_FILE);
  try {
    return readKey(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }

  const temp = join(dataDir, `.${SECRET_KEY_FILE}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  const fd = openSync(temp, "wx", 0o600);
  try {
    chmodSync(temp, 0o600);
    writeSync(fd, randomBytes(SECRET_KEY_BYTES));
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  try {
    try {
      linkSync(temp, path);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "EEXIST") return readKey(path); // another process won the race: use its key
      if (code !== "EPERM" && code !== "ENOTSUP" && code !== "EOPNOTSUPP" && code !== "ENOSYS") throw error;
      renameSync(temp, path);
    }
    syncDir(dataDir);
    return readKey(path);
  } finally {
    try {
      unlinkSync(temp);
    } catch {
      // already renamed into place
    }
  }
}

/** Makes the directory entry durable (best effort: not every platform can open a directory). */
function syncDir(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, "r");
    fsyncSync(fd);
  } catch {
    // best effort
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

function checkKey(key: Buffer): void {
  if (!Buffer.isBuffer(key) || key.length !== SECRET_KEY_BYTES) {
    throw new TypeError(`the key must be a ${SECRET_KEY_BYTES}-byte Buffer`);
  }
}

/**
 * AES-256-GCM with a random 12-byte IV. `aad` binds the text to its context (e.g. the namespace
 * and item kind): opening it with a different aad fails. Output: `plinth-v1:` + base64(iv | tag | ciphertext).
 */
export function sealText(key: Buffer, plaintext: string, aad: string): string {
  checkKey(key);
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv("aes-256-gcm", key, iv);
  cipher.setAAD(Buffer.from(aad, "utf8"));
  const ciphertext = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
  return SEALED_PREFIX + Buffer.concat([iv, cipher.getAuthTag(), ciphertext]).toString("base64");
}

/** The plaintext of `sealText`'s output; throws SealedTextError when it was altered or is not for this key and aad. */
export function openText(key: Buffer, sealed: string, aad: string): string {
  checkKey(key);
  if (typeof sealed !== "string" || !sealed.startsWith(SEALED_PREFIX)) {
    throw new SealedTextError(`sealed text must start with "${SEALED_PREFIX}"`);
  }
  const body = sealed.slice(SEALED_PREFIX.length);
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(body) || body.length % 4 !== 0) {
    throw new SealedTextError("sealed text is not valid base64");
  }
  const raw = Buffer.from(body, "base64");
  if (raw.length < IV_BYTES + TAG_BYTES) throw new SealedTextError("sealed text is too short");
  const decipher = createDecipheriv("aes-256-gcm", key, raw.subarray(0, IV_BYTES), { authTagLength: TAG_BYTES });
  decipher.setAuthTag(raw.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
  decipher.setAAD(Buffer.from(aad, "utf8"));
  try {
    return Buffer.concat([decipher.update(raw.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString("utf8");
  } catch {
    throw new SealedTextError("sealed text failed authentication: it was altered, or sealed with another key or for another context");
  }
}
