/**
 * The known name a key most likely misspells: within two edits of it, compared without case
 * (`max_tokns` → `max_tokens`, `maxlenght` → `maxLength`). Undefined when none is that close, or
 * the key is too short or too long for a guess to mean anything.
 */
export function closestName(key: string, known: Iterable<string>): string | undefined {
  if (key.length < 3 || key.length > 40) return undefined;
  const lower = key.toLowerCase();
  let best: string | undefined;
  let bestDistance = 3;
  for (const name of known) {
    if (Math.abs(name.length - lower.length) >= bestDistance) continue;
    const d = editDistance(lower, name.toLowerCase(), bestDistance);
    if (d < bestDistance) {
      best = name;
      bestDistance = d;
    }
  }
  return best;
}

/** Levenshtein distance, given up (returning `limit`) once every path is at `limit` or more. */
function editDistance(a: string, b: string, limit: number): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const v = Math.min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      row.push(v);
      if (v < rowMin) rowMin = v;
    }
    if (rowMin >= limit) return limit;
    prev = row;
  }
  return prev[b.length];
}
