// The hyperparameters of a GGUF header that llama.cpp asserts on rather than refuses.
//
// llama.cpp's loader ends the whole process (GGML_ASSERT, SIGABRT) on some values a damaged or
// hostile file can hold, where for most others it throws an error the engine reports: a layer count
// of 0 or past its 512 layers, expert counts that contradict each other, and a head count, key/value
// head count or feed-forward length of 0 where the file has the tensors those sizes shape (a tensor
// then has a dimension of 0, which its tensor creation asserts against). One such file would take
// every model the server runs down with it, so these values are checked here first, with the same
// rules as the llama.cpp that node-llama-cpp 3.21.1 bundles (llama-model.cpp, load_hparams and
// create_tensor).

/** llama.cpp's LLAMA_MAX_LAYERS and LLAMA_MAX_EXPERTS. */
const MAX_LAYERS = 512;
const MAX_EXPERTS = 1024;

/** Architectures whose expert count of 1 llama.cpp reads as none (a dense model). */
const ONE_EXPERT_IS_NONE = new Set(["hunyuan-vl", "hunyuan-dense"]);

/** The keys (after `<architecture>.`) whose values are kept while the header is walked. */
export const HPARAM_KEYS = new Set([
  "block_count",
  "nextn_predict_layers",
  "expert_count",
  "expert_used_count",
  "expert_group_count",
  "expert_group_used_count",
  "feed_forward_length",
  "attention.head_count",
  "attention.head_count_kv",
  "attention.key_length",
  "attention.value_length",
]);

/**
 * What the walk keeps: the architecture, the kept keys' u32 values (a number, or a per-layer list
 * of numbers) and, per layer, which of the tensors the sizes shape the file has.
 */
export class HparamRecord {
  architecture: string | undefined;
  readonly values = new Map<string, number | number[]>();
  readonly attentionLayers = new Set<number>();
  readonly kvLayers = new Set<number>();
  readonly ffnLayers = new Set<number>();

  /** Notes a tensor's name: `blk.N.attn_q.weight` and the like. */
  tensor(name: string): void {
    const m = /^blk\.(\d+)\.(attn_q|attn_k|attn_v|attn_qkv|attn_output|ffn_up|ffn_down|ffn_gate)\.weight$/.exec(name);
    if (!m) return;
    const layer = Number(m[1]);
    if (m[2] === "ffn_up" || m[2] === "ffn_down" || m[2] === "ffn_gate") this.ffnLayers.add(layer);
    else {
      this.attentionLayers.add(layer);
      if (m[2] === "attn_k" || m[2] === "attn_v" || m[2] === "attn_qkv") this.kvLayers.add(layer);
    }
  }

  /** The value llama.cpp reads for `key` (its arch-prefixed name), for `layer` when per layer. */
  private value(key: string, layer = 0): number | undefined {
    const v = this.architecture === undefined ? undefined : this.values.get(`${this.architecture}.${key}`);
    return Array.isArray(v) ? v[layer] : v;
  }

  private max(key: string): number | undefined {
    const v = this.architecture === undefined ? undefined : this.values.get(`${this.architecture}.${key}`);
    return Array.isArray(v) ? Math.max(0, ...v) : v;
  }

  /** The first problem llama.cpp would abort on, or undefined. */
  problem(): string | undefined {
    if (this.architecture === undefined || this.architecture === "clip") return undefined;
    const layers = this.value("block_count");
    if (layers !== undefined && (layers < 1 || layers > MAX_LAYERS))
      return `its block_count is ${layers}, outside the 1–${MAX_LAYERS} layers llama.cpp loads`;
    const nextn = this.value("nextn_predict_layers");
    if (layers !== undefined && nextn !== undefined && nextn > layers) return `its nextn_predict_layers (${nextn}) is more than its block_count (${layers})`;

    let experts = this.value("expert_count") ?? 0;
    let used = this.max("expert_used_count") ?? 0;
    if (ONE_EXPERT_IS_NONE.has(this.architecture) && experts <= 1) experts = used = 0;
    const groups = this.value("expert_group_count") ?? 0;
    const groupsUsed = this.value("expert_group_used_count") ?? 0;
    if (experts > MAX_EXPERTS) return `its expert_count is ${experts}, more than the ${MAX_EXPERTS} llama.cpp loads`;
    if (used > experts) return `its expert_used_count (${used}) is more than its expert_count (${experts})`;
    if (experts > 0) {
      if (used === 0) return `it has ${experts} experts but expert_used_count 0`;
      if (groups >= experts) return `its expert_group_count (${groups}) is not less than its expert_count (${experts})`;
      if (groups > 1 && (experts % groups !== 0 || groupsUsed === 0 || groupsUsed >= groups))
        return `its expert groups do not fit its experts (${experts} experts, ${groups} groups, ${groupsUsed} used)`;
    } else if (groups !== 0) return `it has expert groups (${groups}) but no experts`;

    // Sizes of 0 where the file has the tensors they shape: the tensor would have a dimension of 0.
    for (const layer of this.attentionLayers) {
      for (const key of ["attention.head_count", "attention.key_length", "attention.value_length"]) {
        if (this.value(key, layer) === 0) return `its ${key} is 0 for layer ${layer}, which has attention weights`;
      }
    }
    for (const layer of this.kvLayers) {
      if (this.value("attention.head_count_kv", layer) === 0 && this.value("attention.head_count", layer) !== 0)
        return `its attention.head_count_kv is 0 for layer ${layer}, which has key and value weights`;
    }
    for (const layer of this.ffnLayers) {
      if (this.value("feed_forward_length", layer) === 0) return `its feed_forward_length is 0 for layer ${layer}, which has feed-forward weights`;
    }
    return undefined;
  }
}
