/**
 * Reads the value of `{"input": "…"}` as its JSON text arrives in pieces, giving back the decoded
 * characters as soon as they are complete (an escape split across pieces waits for its end). Free
 * text tool inputs travel inside such an object (see engines/llama-cpp/free-text-tools.ts); the
 * Responses and Chat Completions streams show the raw input.
 */
export class JsonStringStream {
  private raw = "";
  private pos = -1;
  private done = false;

  /** Adds JSON text; returns the newly decoded characters of the string value. */
  push(text: string): string {
    this.raw += text;
    if (this.pos === -1) {
      const m = /^\s*\{\s*"input"\s*:\s*"/.exec(this.raw);
      if (!m) return "";
      this.pos = m[0].length;
    }
    let out = "";
    while (!this.done && this.pos < this.raw.length) {
      const ch = this.raw[this.pos];
      if (ch === '"') {
        this.done = true;
        break;
      }
      if (ch !== "\\") {
        out += ch;
        this.pos++;
        continue;
      }
      const e = this.raw[this.pos + 1];
      if (e === undefined) break;
      if (e === "u") {
        const hex = this.raw.slice(this.pos + 2, this.pos + 6);
        if (hex.length < 4) break;
        let code = parseInt(hex, 16);
        let width = 6;
        // A high surrogate needs its low half before it is a character.
        if (code >= 0xd800 && code < 0xdc00) {
          const next = this.raw.slice(this.pos + 6, this.pos + 12);
          if (next.length < 6) break;
          if (next.startsWith("\\u")) {
            code = 0x10000 + ((code - 0xd800) << 10) + (parseInt(next.slice(2), 16) - 0xdc00);
            width = 12;
          }
        }
        out += String.fromCodePoint(code);
        this.pos += width;
        continue;
      }
      const simple: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
      out += simple[e] ?? e;
      this.pos += 2;
    }
    return out;
  }

  /** The whole value, decoded from the complete JSON text (falls back to what was streamed). */
  static decode(json: string): string {
    try {
      const v = JSON.parse(json) as { input?: unknown };
      if (typeof v.input === "string") return v.input;
    } catch {
      // an incomplete call (cut by max_output_tokens): decode what there is
    }
    return new JsonStringStream().push(json);
  }
}
