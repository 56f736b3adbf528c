import type { LlamaModel, Token } from "node-llama-cpp";

/**
 * Text and exact bytes of single tokens, for log probability reports. Detokenizing one token loses
 * bytes when the token is part of a UTF-8 character, so bytes come from the vocabulary itself where
 * the tokenizer family makes that possible.
 */
export class TokenPieces {
  private readonly cache = new Map<number, { text: string; bytes: number[] }>();
  private readonly vocab: readonly string[] | undefined;
  private readonly family: string | undefined;

  constructor(private readonly model: LlamaModel) {
    const ggml = model.fileInfo.metadata.tokenizer?.ggml;
    this.vocab = ggml?.tokens as readonly string[] | undefined;
    this.family = ggml?.model as string | undefined;
  }

  get(token: number): { text: string; bytes: number[] } {
    let piece = this.cache.get(token);
    if (!piece) {
      const text = this.model.detokenize([token as Token], false);
      piece = { text, bytes: this.bytesOf(token, text) };
      this.cache.set(token, piece);
    }
    return piece;
  }

  private bytesOf(token: number, text: string): number[] {
    const raw = this.vocab?.[token];
    if (raw !== undefined) {
      // SentencePiece byte-fallback pieces are spelled <0xNN>.
      const byte = /^<0x([0-9A-Fa-f]{2})>$/.exec(raw);
      if (byte) return [parseInt(byte[1], 16)];
      // Byte-level BPE spells every byte as one printable code point.
      if (this.family === "gpt2") {
        const bytes = [...raw].map((ch) => UNICODE_TO_BYTE.get(ch));
        if (bytes.every((b) => b !== undefined)) return bytes as number[];
      }
    }
    return [...Buffer.from(text, "utf8")];
  }
}

/** The byte ↔ code point table byte-level BPE tokenizers (GPT-2 and descendants) use. */
const UNICODE_TO_BYTE: Map<string, number> = (() => {
  const printable: number[] = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const map = new Map<string, number>();
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const cp = printable.includes(b) ? b : 256 + extra++;
    map.set(String.fromCodePoint(cp), b);
  }
  return map;
})();
