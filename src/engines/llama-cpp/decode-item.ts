// A decode as node-llama-cpp 3.21.1 queues it, read by the batch gate and the decode share to cut a
// long one into pieces.

/** The fields a piece of a decode needs. */
export interface DecodeItem {
  sequenceId: number;
  tokens: readonly number[];
  logits: readonly unknown[];
  firstTokenSequenceIndex: number;
}

/** Whether `item` has those fields, consistent (one logit flag per token). */
export function isSplittable(item: unknown): item is DecodeItem {
  const i = item as Partial<DecodeItem> | undefined;
  return (
    typeof i?.sequenceId === "number" &&
    typeof i.firstTokenSequenceIndex === "number" &&
    Array.isArray(i.tokens) &&
    Array.isArray(i.logits) &&
    i.logits.length === i.tokens.length
  );
}

