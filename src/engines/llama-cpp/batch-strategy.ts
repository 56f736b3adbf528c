import type { BatchItem, PrioritizedBatchItem } from "node-llama-cpp";

// How a context's queued decodes share one batch. Passed to node-llama-cpp as the context's
// `batching.itemPrioritizationStrategy`, in place of its default ("maximumParallelism").
//
// Why not the default: in node-llama-cpp 3.21.1 it hands out more tokens than the batch holds (its
// redistribution passes never take what they give from the free count: a 1,972-token prompt beside
// four one-token steps was given 1,726 of a 512-token batch), and the batch is then filled in queue
// order until it is full. Once a long prompt sat ahead of generating sequences in the queue, it took
// the whole batch and they got nothing: four streams stood still for the 2 s a 2,000-token prompt
// took on the bench model (bench/prefill-stall.ts, docs/benchmarks.md).
//
// Here every item first gets one token (a generating sequence needs no more, and a prompt is never
// starved), then the rest of the batch is shared out evenly over the items that want more, with
// higher evaluation priority first where it does not divide evenly. The total never exceeds `size`,
// and items keep their queue order (the batch gate queues a step in ascending sequence order, which
// llama.cpp decodes as one micro-batch).

export function generationFirstStrategy({ items, size }: { items: readonly BatchItem[]; size: number }): PrioritizedBatchItem[] {
  const amounts = new Array<number>(items.length).fill(0);
  let left = size;
  for (let i = 0; i < items.length && left > 0; i++) {
    if (items[i].tokens.length === 0) continue;
    amounts[i] = 1;
    left--;
  }
  // Items that want more, higher priority first (stable, so queue order breaks ties).
  let wanting = items
    .map((item, i) => i)
    .filter((i) => amounts[i] > 0 && items[i].tokens.length > amounts[i])
    .sort((a, b) => items[b].evaluationPriority - items[a].evaluationPriority);
  while (left > 0 && wanting.length > 0) {
    const share = Math.max(1, Math.floor(left / wanting.length));
    for (const i of wanting) {
      const give = Math.min(items[i].tokens.length - amounts[i], share, left);
      amounts[i] += give;
      left -= give;
      if (left === 0) break;
    }
    wanting = wanting.filter((i) => items[i].tokens.length > amounts[i]);
  }
  const out: PrioritizedBatchItem[] = [];
  // An item left out must not appear at all: node-llama-cpp reads an amount of 0 as 1.
  items.forEach((item, i) => {
    if (amounts[i] > 0) out.push({ item, processAmount: amounts[i] });
  });
  return out;
}
