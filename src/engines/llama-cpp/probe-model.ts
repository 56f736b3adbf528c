import { gguf, writeGguf, type GgufTensor, type GgufValue } from "../../models/gguf-writer.ts";

/**
 * A one-layer llama model of about 60 KB, written for the GPU check (gpu-check.ts): small enough to
 * write and load in milliseconds, and made of the operations every decode uses (embedding lookup,
 * RMS norm, attention with RoPE, a gated feed-forward, the output projection), in f16 like the
 * weights of a real model. Its weights are a fixed pattern; what it generates does not matter.
 */
const N_EMBD = 64;
const N_HEAD = 2;
const N_FF = 128;
const PIECES = ["▁the", "▁a", "▁river", "▁city", "▁king", "s", "ed", "▁and"];

export const PROBE_TOKENS = { bos: 1, firstPiece: 3 + 256 } as const;

function vocabulary() {
  const tokens = ["<unk>", "<s>", "</s>"];
  const types = [2, 3, 3]; // unknown, control, control
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
    types.push(6); // byte
  }
  for (const piece of PIECES) {
    tokens.push(piece);
    types.push(1); // normal
  }
  return { tokens, types, scores: tokens.map((_, i) => -i) };
}

function pattern(name: string, ne: [number, number] | [number], scale: number): GgufTensor {
  let salt = 0;
  for (const ch of name) salt = (salt * 31 + ch.charCodeAt(0)) % 9973;
  return {
    name,
    ne,
    type: ne.length === 1 ? "f32" : "f16",
    fill(out, start) {
      if (ne.length === 1) return void out.fill(1);
      for (let i = 0; i < out.length; i++) out[i] = Math.sin((start + i + 1) * 0.618 + salt) * scale;
    },
  };
}

export async function writeProbeModel(path: string): Promise<void> {
  const vocab = vocabulary();
  const nVocab = vocab.tokens.length;
  const s = 1 / Math.sqrt(N_EMBD);
  const metadata: [string, GgufValue][] = [
    ["general.architecture", gguf.str("llama")],
    ["general.name", gguf.str("plinth-gpu-probe")],
    ["general.file_type", gguf.u32(1)],
    ["llama.vocab_size", gguf.u32(nVocab)],
    ["llama.context_length", gguf.u32(64)],
    ["llama.embedding_length", gguf.u32(N_EMBD)],
    ["llama.block_count", gguf.u32(1)],
    ["llama.feed_forward_length", gguf.u32(N_FF)],
    ["llama.attention.head_count", gguf.u32(N_HEAD)],
    ["llama.attention.head_count_kv", gguf.u32(N_HEAD)],
    ["llama.rope.dimension_count", gguf.u32(N_EMBD / N_HEAD)],
    ["llama.rope.freq_base", gguf.f32(10000)],
    ["llama.attention.layer_norm_rms_epsilon", gguf.f32(1e-5)],
    ["tokenizer.ggml.model", gguf.str("llama")],
    ["tokenizer.ggml.tokens", gguf.strs(vocab.tokens)],
    ["tokenizer.ggml.scores", gguf.f32s(vocab.scores)],
    ["tokenizer.ggml.token_type", gguf.i32s(vocab.types)],
    ["tokenizer.ggml.bos_token_id", gguf.u32(1)],
    ["tokenizer.ggml.eos_token_id", gguf.u32(2)],
    ["tokenizer.ggml.unknown_token_id", gguf.u32(0)],
  ];
  const tensors: GgufTensor[] = [
    pattern("token_embd.weight", [N_EMBD, nVocab], 1),
    pattern("blk.0.attn_norm.weight", [N_EMBD], 1),
    pattern("blk.0.attn_q.weight", [N_EMBD, N_EMBD], s),
    pattern("blk.0.attn_k.weight", [N_EMBD, N_EMBD], s),
    pattern("blk.0.attn_v.weight", [N_EMBD, N_EMBD], s),
    pattern("blk.0.attn_output.weight", [N_EMBD, N_EMBD], s),
    pattern("blk.0.ffn_norm.weight", [N_EMBD], 1),
    pattern("blk.0.ffn_gate.weight", [N_EMBD, N_FF], s),
    pattern("blk.0.ffn_up.weight", [N_EMBD, N_FF], s),
    pattern("blk.0.ffn_down.weight", [N_FF, N_EMBD], 1 / Math.sqrt(N_FF)),
    pattern("output_norm.weight", [N_EMBD], 1),
    pattern("output.weight", [N_EMBD, nVocab], s),
  ];
  await writeGguf(path, { metadata, tensors });
}
