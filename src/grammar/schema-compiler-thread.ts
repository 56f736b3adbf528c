// Worker side of SchemaCompiler (schema-compiler.ts): compiles schemas one message at a time.
import { parentPort } from "node:worker_threads";
import { compileJsonSchema, UnsupportedSchemaError, type JsonSchemaToGbnfOptions } from "./json-schema-to-gbnf.ts";

parentPort!.on("message", ({ id, schema, opts }: { id: number; schema: unknown; opts: JsonSchemaToGbnfOptions }) => {
  try {
    const { gbnf, relaxed, loadCost } = compileJsonSchema(schema, opts);
    parentPort!.postMessage({ id, ok: true, gbnf, relaxed, loadCost });
  } catch (e) {
    if (e instanceof UnsupportedSchemaError) {
      const message = e.reason;
      parentPort!.postMessage({ id, ok: false, code: e.code, path: e.path, message });
    } else parentPort!.postMessage({ id, ok: false, code: "internal", path: "", message: e instanceof Error ? e.message : String(e) });
  }
});
parentPort!.postMessage({ ready: true });
