import assert from "./assert.ts";
import type { PlinthHttp } from "./requests.ts";

/**
 * A strict json_schema request, for two seeds, through `http` to `model`: the answer must parse and
 * carry exactly the schema's keys with the right types. Used where an upstream enforces the schema
 * itself (another Plinth, llama-server), to show that the router passed it on.
 */
export async function expectSchemaAnswers(http: PlinthHttp, model: string): Promise<void> {
  const schema = { type: "object", properties: { ok: { type: "boolean" }, n: { type: "integer", minimum: 0, maximum: 9 } }, required: ["ok", "n"], additionalProperties: false };
  for (const seed of [1, 2]) {
    const r = await http.chat({
      model,
      messages: [{ role: "user", content: "JSON please" }],
      response_format: { type: "json_schema", json_schema: { name: "x", schema, strict: true } },
      max_tokens: 60,
      seed,
    });
    const value = JSON.parse(r.choices[0].message.content!);
    assert.deepEqual(Object.keys(value).sort(), ["n", "ok"]);
    assert.equal(typeof value.ok, "boolean");
  }
}
