// Worker side of compileSchemaInWorker (schema-worker.ts): compiles one schema and posts the result.
import { parentPort, workerData } from "node:worker_threads";
import { compileJsonSchema, UnsupportedSchemaError, type JsonSchemaToGbnfOptions } from "./json-schema-to-gbnf.ts";

const { schema, opts } = workerData as { schema: unknown; opts: JsonSchemaToGbnfOptions };
try {
  const { gbnf, relaxed, loadCost } = compileJsonSchema(schema, opts);
  parentPort!.postMessage({ ok: true, gbnf, relaxed, loadCost });
} catch (e) {
  if (e instanceof UnsupportedSchemaError) {
    const message = e.reason;
    parentPort!.postMessage({ ok: false, code: e.code, path: e.path, message });
  } else parentPort!.postMessage({ ok: false, code: "internal", path: "", message: e instanceof Error ? e.message : String(e) });
}
