/** One sample of the Prometheus text format. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  types: Map<string, string>;
  samples: Sample[];
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$/;
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)/y;

/**
 * A minimal parser of the Prometheus text exposition format (0.0.4): HELP and TYPE comments and
 * samples with labels. Throws on any line it cannot read, on a sample of no declared family, and on a
 * family declared twice.
 */
export function parsePrometheus(text: string): Exposition {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const [i, line] of text.split("\n").entries()) {
    if (line.trim() === "") continue;
    if (line.startsWith("#")) {
      const m = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) ?(.*)$/.exec(line);
      if (!m) throw new Error(`line ${i + 1}: bad comment: ${line}`);
      if (m[1] === "TYPE") {
        if (types.has(m[2])) throw new Error(`line ${i + 1}: ${m[2]} declared twice`);
        if (!["counter", "gauge", "histogram", "summary", "untyped"].includes(m[3])) throw new Error(`line ${i + 1}: bad type ${m[3]}`);
        types.set(m[2], m[3]);
      }
      continue;
    }
    const m = SAMPLE.exec(line);
    if (!m) throw new Error(`line ${i + 1}: bad sample: ${line}`);
    const labels: Record<string, string> = {};
    if (m[3]) {
      LABEL.lastIndex = 0;
      while (LABEL.lastIndex < m[3].length) {
        const l = LABEL.exec(m[3]);
        if (!l) throw new Error(`line ${i + 1}: bad labels: ${m[3]}`);
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
      }
    }
    // Prometheus reads values with Go's ParseFloat: NaN and Inf in any case (prom-client writes "Nan").
    const v = m[4].toLowerCase();
    const value = v === "+inf" || v === "inf" ? Infinity : v === "-inf" ? -Infinity : Number(m[4]);
    if (Number.isNaN(value) && v !== "nan") throw new Error(`line ${i + 1}: bad value ${m[4]}`);
    const family = [m[1], m[1].replace(/_(bucket|sum|count)$/, "")].find((n) => types.has(n));
    if (!family) throw new Error(`line ${i + 1}: ${m[1]} has no TYPE`);
    samples.push({ name: m[1], labels, value });
  }
  return { types, samples };
}

/** The sum of the samples named `name` whose labels include `match`. */
export function sum(exp: Exposition, name: string, match: Record<string, string> = {}): number {
  return exp.samples
    .filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);
}
