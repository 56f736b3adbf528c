import { Environment, Interpreter } from "@huggingface/jinja";

// Python's behaviour where node-llama-cpp's Jinja engine (@huggingface/jinja) has none, for the
// templates that rely on it. Python's Jinja is what the models' authors render with, and llama.cpp's
// server follows it:
//
// - list methods: Kimi K2's template queues each call's id with `ids.append(id)` and takes it back
//   for the call's result with `ids.pop(0)`; the engine stopped at the first `append` ("Cannot call
//   something that is not a function"), so no conversation with an answered call rendered.
// - `dict|string`: Apriel's templates list each tool as `tool|string`, Python's repr of the dict
//   (`{'type': 'function', …}`); the engine refused it ("Unknown ObjectValue filter: string"), so
//   node-llama-cpp could not render tools through the template at all.
// - `list|string`, `bool|string`, `none|string`: LFM2.5's template writes an answered call's
//   arguments that are not strings or mappings with `|string`, Python's `[1, 'x']`, `True`, `None`;
//   the engine wrote a list as JSON and a boolean as `true`, and refused None, so the whole
//   conversation fell back to node-llama-cpp's own writing of calls.
// - `list|min`, `list|max`: MiniCPM5's template counts an answered turn's calls with
//   `[a, b]|min`; the engine refused it ("Unknown ArrayValue filter: min"), so calls and results
//   were written by node-llama-cpp instead of the template.
// - `d.items()` where `d` has a key "items" (likewise `keys`, `values`, `get`): Python's Jinja reads
//   `d.name` as an attribute first, so the dict's method wins; the engine read the key first and
//   then could not call it. Every JSON Schema array has an `items` key, so GigaChat's templates
//   refused any tool with an array parameter, and a call argument named `items` sent DeepSeek V3.2/V4,
//   GLM, MiniMax, LFM2.5 and MiniCPM5 conversations to node-llama-cpp's own writing of calls.
//   Only a call: `d.items` alone still reads the key (templates that mean the key write it so).
// - `undefined|trim`: Python's Jinja trims an undefined value to "" (Hermes-style templates trim each
//   parameter's description, which a schema need not have); the engine refused it.
//
// The engine's value classes are not exported: they are reached through values it makes of plain
// ones, and their builtins extended (a builtin of a dict is also what the engine applies as a
// filter of that name).

/** The engine's runtime values, as far as used here. */
interface Value {
  type: string;
  value: unknown;
  _builtins?: Map<string, Value>;
}
type ValueClass = new (value?: unknown) => Value;

let installed = false;

/** Extends the engine's lists and dicts once per process, before any template is rendered. */
export function renderJinjaLikePython(): void {
  if (installed) return;
  installed = true;
  const sample = (v: unknown) => {
    const env = new Environment();
    env.set("v", v);
    return env.lookupVariable("v") as unknown as Value;
  };
  const [list, dict, fn, none, int, str] = [sample([]), sample({}), sample(() => null), sample(null), sample(0), sample("")];
  if (list.type !== "ArrayValue" || dict.type !== "ObjectValue" || fn.type !== "FunctionValue" || none.type !== "NullValue" || int.type !== "IntegerValue" || str.type !== "StringValue")
    throw new Error("@huggingface/jinja's values changed; jinja-python.ts needs updating");
  const FunctionValue = fn.constructor as ValueClass;
  const NullValue = none.constructor as ValueClass;
  const IntegerValue = int.constructor as ValueClass;
  const StringValue = str.constructor as ValueClass;
  const nothing = () => new NullValue(null);

  extendBuiltins(Object.getPrototypeOf(list), (self) => {
    const items = self.value as Value[];
    return [
      // Cached by the engine at first use, which a list that grows would then answer wrongly.
      ["length", new IntegerValue(items.length)],
      ["append", new FunctionValue((args: Value[]) => (items.push(args[0] ?? nothing()), nothing()))],
      ["extend", new FunctionValue((args: Value[]) => (items.push(...((args[0]?.value as Value[] | undefined) ?? [])), nothing()))],
      ["insert", new FunctionValue((args: Value[]) => (items.splice(Number(args[0]?.value ?? 0), 0, args[1] ?? nothing()), nothing()))],
      [
        "pop",
        new FunctionValue((args: Value[]) => {
          const at = args[0] === undefined ? items.length - 1 : Number(args[0].value);
          const [item] = items.splice(at < 0 ? items.length + at : at, 1);
          if (item === undefined) throw new Error("pop index out of range");
          return item;
        }),
      ],
    ];
  });
  extendBuiltins(Object.getPrototypeOf(dict), (self) => [["string", new FunctionValue(() => new StringValue(pythonRepr(self)))]]);
  // Other values' `string` filter is decided inside the interpreter's applyFilter, ahead of builtins.
  const proto = Interpreter.prototype as unknown as { applyFilter?: (operand: Value, filter: { type: string; value: unknown }, env: unknown) => Value };
  const applyFilter = proto.applyFilter;
  if (typeof applyFilter !== "function") throw new Error("@huggingface/jinja's interpreter changed; jinja-python.ts needs updating");
  const PYTHON_STRING = new Set(["ArrayValue", "BooleanValue", "NullValue", "TupleValue"]);
  proto.applyFilter = function (this: unknown, operand, filter, env) {
    if (filter?.type === "Identifier" && filter.value === "string" && PYTHON_STRING.has(operand?.type)) return new StringValue(pythonRepr(operand));
    if (filter?.type === "Identifier" && (filter.value === "min" || filter.value === "max") && operand?.type === "ArrayValue") return extreme(operand.value as Value[], filter.value);
    if (filter?.type === "Identifier" && filter.value === "trim" && operand?.type === "UndefinedValue") return new StringValue("");
    return applyFilter.call(this, operand, filter, env);
  };
  const interp = proto as unknown as {
    evaluateCallExpression?: (expr: CallExpression, env: unknown) => Value;
    evaluate: (node: unknown, env: unknown) => Value;
  };
  const evaluateCall = interp.evaluateCallExpression;
  if (typeof evaluateCall !== "function") throw new Error("@huggingface/jinja's interpreter changed; jinja-python.ts needs updating");
  interp.evaluateCallExpression = function (this: typeof interp, expr, env) {
    const callee = expr.callee;
    if (callee?.type !== "MemberExpression" || callee.computed || callee.property?.type !== "Identifier" || !DICT_METHODS.has(callee.property.value as string))
      return evaluateCall.call(this, expr, env);
    // `d.items()`: the dict's method, whatever keys it has. Only a call: `d.items` alone still reads
    // a key of that name first, as templates that mean the key write it (Command R+'s
    // `json_spec.items` for an array's item schema) and as node-llama-cpp always read it.
    const object = this.evaluate(callee.object, env);
    if (object?.type !== "ObjectValue") return evaluateCall.call(this, { ...expr, callee: { ...callee, object: { type: "Evaluated", value: object } } }, env);
    const method = (object as unknown as { builtins: Map<string, Value> }).builtins.get(callee.property.value as string)!;
    return evaluateCall.call(this, { ...expr, callee: { type: "Evaluated", value: method } as unknown as CallExpression["callee"] }, env);
  };
  const evaluate = interp.evaluate;
  // Lets the calls above hand the engine a value it has already evaluated (evaluating the object
  // again would run a call inside it twice).
  interp.evaluate = function (this: typeof interp, node, env) {
    if ((node as { type?: string } | undefined)?.type === "Evaluated") return (node as { value: Value }).value;
    return evaluate.call(this, node, env);
  };
}

/** Python dict methods the engine also has; `d.name` reaches them even when `d` has such a key. */
const DICT_METHODS = new Set(["items", "keys", "values", "get"]);

interface CallExpression {
  callee?: { type: string; computed?: boolean; object?: unknown; property?: { type: string; value: unknown } };
  args: unknown[];
}

/** A list's least or greatest item, compared as Python compares numbers or strings. */
function extreme(items: readonly Value[], which: "min" | "max"): Value {
  if (items.length === 0) throw new Error(`${which}() arg is an empty sequence`);
  return items.reduce((best, v) => ((which === "min" ? (v.value as number) < (best.value as number) : (v.value as number) > (best.value as number)) ? v : best));
}

/** Rebuilds a value class's builtins on each use (they may depend on a changing value), with more. */
function extendBuiltins(proto: object, more: (self: Value) => Array<[string, Value]>): void {
  const own = Object.getOwnPropertyDescriptor(proto, "builtins")?.get;
  if (!own) throw new Error("@huggingface/jinja's values changed; jinja-python.ts needs updating");
  Object.defineProperty(proto, "builtins", {
    configurable: true,
    get(this: Value) {
      this._builtins = undefined;
      const map = new Map(own.call(this) as Map<string, Value>);
      for (const [name, value] of more(this)) map.set(name, value);
      return map;
    },
  });
}

/** Python's repr() of an engine value (what `str()` of a dict or list writes). */
export function pythonRepr(v: Value): string {
  switch (v.type) {
    case "ObjectValue":
    case "KeywordArgumentsValue":
      return `{${[...(v.value as Map<string, Value>)].map(([k, x]) => `${pyString(k)}: ${pythonRepr(x)}`).join(", ")}}`;
    case "ArrayValue":
      return `[${(v.value as Value[]).map(pythonRepr).join(", ")}]`;
    case "TupleValue": {
      const items = (v.value as Value[]).map(pythonRepr);
      return `(${items.join(", ")}${items.length === 1 ? "," : ""})`;
    }
    case "StringValue":
      return pyString(v.value as string);
    case "BooleanValue":
      return v.value ? "True" : "False";
    case "NullValue":
    case "UndefinedValue":
      return "None";
    default:
      return String(v);
  }
}

/** Python's repr() of a str: single quotes unless the text holds one and no double quote. */
function pyString(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = "";
  for (const ch of s) {
    const code = ch.codePointAt(0)!;
    if (ch === "\\") out += "\\\\";
    else if (ch === quote) out += "\\" + ch;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (code < 0x20 || code === 0x7f) out += "\\x" + code.toString(16).padStart(2, "0");
    else out += ch;
  }
  return quote + out + quote;
}
